package topology

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// maxExpand bounds how many names one parse may expand to, so that a typo
// such as "n[0-999999999]" is an error rather than an out-of-memory crash.
// A variable only so tests can lower it.
var maxExpand = 1 << 20

// hostlistError is an error at a byte offset inside a hostlist expression.
type hostlistError struct {
	off int
	msg string
}

func (e *hostlistError) Error() string { return e.msg }

// ExpandHostlist expands a Slurm hostlist expression into names, in order.
//
// The expression is a comma-separated list of names; a name may contain
// bracketed ranges: "node[001-016,020],login1". A range keeps the width of
// its lower bound, so "n[08-10]" gives n08 n09 n10 and "n[8-10]" gives n8 n9
// n10. Several bracket groups in one name expand as a cartesian product,
// leftmost slowest: "r[1-2]n[1-2]" gives r1n1 r1n2 r2n1 r2n2. Names may use
// letters, digits and "-_.:+@". Duplicates are kept; callers decide whether
// they are errors.
func ExpandHostlist(expr string) ([]string, error) {
	names, _, err := expandHostlist(expr, 0)
	if err != nil {
		var he *hostlistError
		if errors.As(err, &he) {
			return nil, fmt.Errorf("hostlist %q: column %d: %s", expr, he.off+1, he.msg)
		}
		return nil, err
	}
	return names, nil
}

// isNameByte reports whether c may appear in a node or switch name.
func isNameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-_.:+@", c) >= 0
}

// expandHostlist expands expr; budget is how many names were already expanded
// by the caller (for the maxExpand limit). It returns, for each name, the byte
// offset in expr of the list item it came from.
func expandHostlist(expr string, budget int) ([]string, []int, error) {
	if expr == "" {
		return nil, nil, &hostlistError{0, "empty host list"}
	}
	var names []string
	var offs []int
	start := 0
	depth := 0
	for i := 0; i <= len(expr); i++ {
		if i < len(expr) {
			switch expr[i] {
			case '[':
				depth++
				continue
			case ']':
				depth--
				continue
			case ',':
				if depth > 0 {
					continue
				}
			default:
				continue
			}
		}
		item := expr[start:i]
		if item == "" {
			return nil, nil, &hostlistError{start, "empty name in host list"}
		}
		got, err := expandItem(item, budget+len(names))
		if err != nil {
			if he, ok := err.(*hostlistError); ok {
				he.off += start
			}
			return nil, nil, err
		}
		names = append(names, got...)
		for range got {
			offs = append(offs, start)
		}
		start = i + 1
	}
	return names, offs, nil
}

// segment is one part of a host list item: literal text, or a set of
// numbers from a bracket, each printed with a minimum width.
type segment struct {
	text string
	nums []numRange
}

type numRange struct {
	lo, hi int
	width  int
}

func (s segment) count() int {
	if s.nums == nil {
		return 1
	}
	n := 0
	for _, r := range s.nums {
		n += r.hi - r.lo + 1
	}
	return n
}

// expandItem expands one comma-free (outside brackets) item.
func expandItem(item string, budget int) ([]string, error) {
	var segs []segment
	i := 0
	for i < len(item) {
		c := item[i]
		switch {
		case c == '[':
			end := strings.IndexByte(item[i+1:], ']')
			if end < 0 {
				return nil, &hostlistError{i, "unclosed '['"}
			}
			body := item[i+1 : i+1+end]
			if j := strings.IndexByte(body, '['); j >= 0 {
				return nil, &hostlistError{i + 1 + j, "nested '['"}
			}
			nums, err := parseRanges(body)
			if err != nil {
				if he, ok := err.(*hostlistError); ok {
					he.off += i + 1
				}
				return nil, err
			}
			segs = append(segs, segment{nums: nums})
			i += end + 2
		case c == ']':
			return nil, &hostlistError{i, "unexpected ']'"}
		case isNameByte(c):
			j := i
			for j < len(item) && isNameByte(item[j]) {
				j++
			}
			segs = append(segs, segment{text: item[i:j]})
			i = j
		default:
			return nil, &hostlistError{i, fmt.Sprintf("invalid character %q in name", c)}
		}
	}
	total := 1
	for _, s := range segs {
		total *= s.count()
		if budget+total > maxExpand {
			return nil, &hostlistError{0, fmt.Sprintf("expands to more than %d names", maxExpand)}
		}
	}
	names := make([]string, 0, total)
	var buf []byte
	var rec func(k int)
	rec = func(k int) {
		if k == len(segs) {
			names = append(names, string(buf))
			return
		}
		s := segs[k]
		if s.nums == nil {
			n := len(buf)
			buf = append(buf, s.text...)
			rec(k + 1)
			buf = buf[:n]
			return
		}
		for _, r := range s.nums {
			for v := r.lo; v <= r.hi; v++ {
				n := len(buf)
				buf = appendPadded(buf, v, r.width)
				rec(k + 1)
				buf = buf[:n]
			}
		}
	}
	rec(0)
	return names, nil
}

func appendPadded(buf []byte, v, width int) []byte {
	s := strconv.Itoa(v)
	for i := len(s); i < width; i++ {
		buf = append(buf, '0')
	}
	return append(buf, s...)
}

// parseRanges parses the inside of a bracket: "001-016,020".
func parseRanges(body string) ([]numRange, error) {
	if body == "" {
		return nil, &hostlistError{0, "empty '[]'"}
	}
	var out []numRange
	off := 0
	for part := range strings.SplitSeq(body, ",") {
		if part == "" {
			return nil, &hostlistError{off, "empty range in '[]'"}
		}
		loS, hiS, isRange := strings.Cut(part, "-")
		lo, err := parseRangeNum(loS, off)
		if err != nil {
			return nil, err
		}
		hi := lo
		if isRange {
			hi, err = parseRangeNum(hiS, off+len(loS)+1)
			if err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, &hostlistError{off, fmt.Sprintf("range %s is descending", part)}
			}
		}
		out = append(out, numRange{lo: lo, hi: hi, width: len(loS)})
		off += len(part) + 1
	}
	return out, nil
}

func parseRangeNum(s string, off int) (int, error) {
	if s == "" {
		return 0, &hostlistError{off, "missing number in range"}
	}
	if len(s) > 9 {
		return 0, &hostlistError{off, fmt.Sprintf("number %q has more than 9 digits", s)}
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, &hostlistError{off + i, fmt.Sprintf("invalid character %q in range; want digits", s[i])}
		}
	}
	v, _ := strconv.Atoi(s)
	return v, nil
}

// FormatHostlist compresses names into a Slurm hostlist expression, the
// inverse of ExpandHostlist up to order and duplicates: expanding the result
// gives each distinct name once, grouped by prefix in natural order
// ("n2" before "n10"). Names sharing a prefix and a trailing number of the
// same zero-padded width collapse into ranges: n001 n002 n003 n007 becomes
// "n[001-003,007]".
func FormatHostlist(names []string) string {
	type group struct {
		prefix string
		width  int // 0: unpadded
		nums   []int
	}
	var plain []string
	groups := map[[2]string]*group{}
	var order []*group
	key := func(prefix string, width int) [2]string { return [2]string{prefix, strconv.Itoa(width)} }
	type parsed struct {
		prefix string
		digits string
	}
	ps := make([]parsed, 0, len(names))
	for _, n := range names {
		j := len(n)
		for j > 0 && n[j-1] >= '0' && n[j-1] <= '9' {
			j--
		}
		if j == len(n) || len(n)-j > 9 {
			plain = append(plain, n)
			continue
		}
		ps = append(ps, parsed{n[:j], n[j:]})
	}
	// Padded numbers first, so unpadded ones of the same length can join them.
	for _, p := range ps {
		if len(p.digits) > 1 && p.digits[0] == '0' {
			k := key(p.prefix, len(p.digits))
			if groups[k] == nil {
				groups[k] = &group{prefix: p.prefix, width: len(p.digits)}
				order = append(order, groups[k])
			}
		}
	}
	for _, p := range ps {
		v, _ := strconv.Atoi(p.digits)
		k := key(p.prefix, 0)
		if len(p.digits) > 1 && p.digits[0] == '0' {
			k = key(p.prefix, len(p.digits))
		} else if groups[key(p.prefix, len(p.digits))] != nil {
			k = key(p.prefix, len(p.digits))
		}
		g := groups[k]
		if g == nil {
			g = &group{prefix: p.prefix}
			groups[k] = g
			order = append(order, g)
		}
		g.nums = append(g.nums, v)
	}
	type out struct{ first, text string }
	var outs []out
	for _, n := range plain {
		outs = append(outs, out{n, n})
	}
	for _, g := range order {
		slices.Sort(g.nums)
		g.nums = slices.Compact(g.nums)
		first := string(appendPadded([]byte(g.prefix), g.nums[0], g.width))
		if len(g.nums) == 1 {
			outs = append(outs, out{first, first})
			continue
		}
		var b strings.Builder
		b.WriteString(g.prefix)
		b.WriteByte('[')
		for i := 0; i < len(g.nums); {
			j := i
			for j+1 < len(g.nums) && g.nums[j+1] == g.nums[j]+1 {
				j++
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.Write(appendPadded(nil, g.nums[i], g.width))
			if j > i {
				b.WriteByte('-')
				b.Write(appendPadded(nil, g.nums[j], g.width))
			}
			i = j + 1
		}
		b.WriteByte(']')
		outs = append(outs, out{first, b.String()})
	}
	slices.SortFunc(outs, func(a, b out) int { return naturalCompare(a.first, b.first) })
	texts := make([]string, 0, len(outs))
	for i, o := range outs {
		if i > 0 && o.text == outs[i-1].text {
			continue
		}
		texts = append(texts, o.text)
	}
	return strings.Join(texts, ",")
}
