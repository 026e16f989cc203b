// Package slurm meets Slurm users where they are: it reads a batch
// script's #SBATCH headers and sbatch's flags into a job spec, writes and
// reads Slurm's compressed host lists (host[1-3,7]), and gives ranks the
// SLURM_* variables that Lightning, NeMo and scripts read.
//
// It imports the standard library and internal/api.
package slurm

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// CompressHosts writes names as Slurm's compressed host list, in the
// order given: runs of names that share a prefix and a number of the
// same width become one bracket ("gpu[01-03,07]"), as scontrol show
// hostlist does.
func CompressHosts(names []string) string {
	type group struct {
		prefix, suffix string
		width          int
		nums           []int
	}
	type key struct {
		prefix, suffix string
		width          int
	}
	var groups []*group
	byKey := map[key]*group{}
	for _, n := range names {
		prefix, num, width, suffix, ok := splitHost(n)
		if !ok {
			groups = append(groups, &group{prefix: n, width: -1})
			continue
		}
		k := key{prefix, suffix, width}
		g := byKey[k]
		if g == nil {
			g = &group{prefix: prefix, suffix: suffix, width: width}
			byKey[k] = g
			groups = append(groups, g)
		}
		g.nums = append(g.nums, num)
	}
	parts := make([]string, 0, len(groups))
	for _, g := range groups {
		if g.width < 0 {
			parts = append(parts, g.prefix)
			continue
		}
		pad := func(n int) string { return fmt.Sprintf("%0*d", g.width, n) }
		if len(g.nums) == 1 {
			parts = append(parts, g.prefix+pad(g.nums[0])+g.suffix)
			continue
		}
		sort.Ints(g.nums)
		var ranges []string
		for i := 0; i < len(g.nums); {
			j := i
			for j+1 < len(g.nums) && g.nums[j+1] <= g.nums[j]+1 {
				j++
			}
			if g.nums[i] == g.nums[j] {
				ranges = append(ranges, pad(g.nums[i]))
			} else {
				ranges = append(ranges, pad(g.nums[i])+"-"+pad(g.nums[j]))
			}
			i = j + 1
		}
		parts = append(parts, g.prefix+"["+strings.Join(ranges, ",")+"]"+g.suffix)
	}
	return strings.Join(parts, ",")
}

// splitHost splits "gpu007-ib" into "gpu", 7, width 3, "-ib": the last
// run of digits is the number. Names without digits, and numbers too long
// to hold, are not split.
func splitHost(n string) (prefix string, num, width int, suffix string, ok bool) {
	end := strings.LastIndexAny(n, "0123456789")
	if end < 0 {
		return "", 0, 0, "", false
	}
	start := end
	for start > 0 && n[start-1] >= '0' && n[start-1] <= '9' {
		start--
	}
	digits := n[start : end+1]
	if len(digits) > 9 || strings.ContainsAny(n, "[],") {
		return "", 0, 0, "", false
	}
	v, _ := strconv.Atoi(digits)
	return n[:start], v, len(digits), n[end+1:], true
}

// maxExpanded bounds ExpandHosts, against "n[0-999999999]".
const maxExpanded = 100000

// ExpandHosts reads a compressed host list ("gpu[01-03,07],login1") into
// its names, in order. Errors say what is malformed.
func ExpandHosts(list string) ([]string, error) {
	var out []string
	for _, item := range splitTop(list) {
		if item == "" {
			continue
		}
		open := strings.IndexByte(item, '[')
		if open < 0 {
			if strings.ContainsAny(item, "]") {
				return nil, fmt.Errorf("host list %q: %q has ] without [", list, item)
			}
			out = append(out, item)
			continue
		}
		end := strings.IndexByte(item, ']')
		if end < open || strings.Count(item, "[") != 1 || strings.Count(item, "]") != 1 {
			return nil, fmt.Errorf("host list %q: %q: want one [ranges] per name", list, item)
		}
		prefix, body, suffix := item[:open], item[open+1:end], item[end+1:]
		for _, r := range strings.Split(body, ",") {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil || a < 0 || b < a || lo == "" || hi == "" {
				return nil, fmt.Errorf("host list %q: range %q: want N or N-M with N ≤ M", list, r)
			}
			if len(out)+(b-a+1) > maxExpanded {
				return nil, fmt.Errorf("host list %q: more than %d hosts", list, maxExpanded)
			}
			for n := a; n <= b; n++ {
				out = append(out, fmt.Sprintf("%s%0*d%s", prefix, len(lo), n, suffix))
			}
		}
	}
	return out, nil
}

// splitTop splits at commas outside brackets.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
