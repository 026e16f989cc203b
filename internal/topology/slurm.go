package topology

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
)

// ParseError is a problem at a place in a topology file. Line and Col are
// 1-based (Col counts bytes); Col is 0 when the problem is a whole line, and
// Line is 0 when it is the whole file.
type ParseError struct {
	File string
	Line int
	Col  int
	Msg  string
}

func (e *ParseError) Error() string {
	switch {
	case e.Line == 0:
		return fmt.Sprintf("%s: %s", e.File, e.Msg)
	case e.Col == 0:
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", e.File, e.Line, e.Col, e.Msg)
}

// maxLineBytes bounds one physical line of a topology file.
const maxLineBytes = 1 << 20

// maxSwitchName is Slurm's limit on SwitchName.
const maxSwitchName = 64

// kv is one Key=Value pair of a record, with where its key and value start.
type kv struct {
	key, val  string
	line, col int                           // of the key
	valAt     func(off int) (line, col int) // position of byte off of val
}

// valErr is a ParseError at byte off of the value.
func (p kv) valErr(file string, off int, msg string) *ParseError {
	l, c := p.valAt(off)
	return &ParseError{file, l, c, msg}
}

// record is one logical line: Key=Value pairs, continued over physical
// lines ending in a backslash.
type record []kv

// readRecords splits a Slurm-style configuration file into records. A '#'
// starts a comment to the end of the line. A line whose last non-blank,
// non-comment character is '\' is joined to the next one, as Slurm does: the
// backslash is dropped and the texts are concatenated, so a list may be split
// as "Nodes=a[1-4],\" followed by "b[1-4]" at the start of the next line.
func readRecords(r io.Reader, file string) ([]record, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	var recs []record
	type pos struct{ line, col int }
	var text []byte
	var at []pos // position of each byte of text
	line := 0
	cont := false
	for sc.Scan() {
		line++
		phys := sc.Text()
		if i := strings.IndexByte(phys, '#'); i >= 0 {
			phys = phys[:i]
		}
		trimmed := strings.TrimRight(phys, " \t\r")
		cont = strings.HasSuffix(trimmed, `\`)
		if cont {
			phys = trimmed[:len(trimmed)-1]
		}
		for i := 0; i < len(phys); i++ {
			text = append(text, phys[i])
			at = append(at, pos{line, i + 1})
		}
		if len(text) > maxLineBytes {
			return nil, &ParseError{file, line, 0, fmt.Sprintf("continued line longer than %d bytes", maxLineBytes)}
		}
		if cont {
			continue
		}
		positions := at
		rec, err := tokenize(file, string(text), func(i int) (int, int) { return positions[i].line, positions[i].col })
		if err != nil {
			return nil, err
		}
		if len(rec) > 0 {
			recs = append(recs, rec)
		}
		text, at = nil, nil // closures in rec keep the old ones
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, &ParseError{file, line + 1, 0, fmt.Sprintf("line longer than %d bytes", maxLineBytes)}
		}
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if cont {
		return nil, &ParseError{file, line, 0, `file ends with a '\' continuation`}
	}
	return recs, nil
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v' }

// tokenize splits one logical line into Key=Value pairs; where maps a byte
// offset of text to its line and column in the file.
func tokenize(file, text string, where func(int) (int, int)) (record, error) {
	var rec record
	i := 0
	for i < len(text) {
		if isSpace(text[i]) {
			i++
			continue
		}
		j := i
		for j < len(text) && !isSpace(text[j]) {
			j++
		}
		tok := text[i:j]
		errAt := func(off int, msg string) error {
			l, c := where(off)
			return &ParseError{file, l, c, msg}
		}
		if b := strings.IndexByte(tok, '\\'); b >= 0 {
			return nil, errAt(i+b, `unexpected '\' (a backslash only continues a line at its end)`)
		}
		eq := strings.IndexByte(tok, '=')
		switch {
		case eq < 0:
			return nil, errAt(i, fmt.Sprintf("expected Key=Value, got %q", tok))
		case eq == 0:
			return nil, errAt(i, fmt.Sprintf("missing key before '=' in %q", tok))
		case eq == len(tok)-1:
			return nil, errAt(i+eq, fmt.Sprintf("empty value for %s", tok[:eq]))
		}
		p := kv{key: tok[:eq], val: tok[eq+1:]}
		p.line, p.col = where(i)
		vstart, vlen := i+eq+1, len(tok)-eq-1
		p.valAt = func(off int) (int, int) { return where(vstart + min(max(off, 0), vlen-1)) }
		rec = append(rec, p)
		i = j
	}
	return rec, nil
}

// fields checks a record's keys against the allowed ones (case-insensitive,
// as Slurm does) and returns the pairs by canonical key.
func (r record) fields(file string, allowed []string) (map[string]kv, error) {
	out := make(map[string]kv, len(r))
	for _, p := range r {
		canon := ""
		for _, a := range allowed {
			if strings.EqualFold(p.key, a) {
				canon = a
				break
			}
		}
		if canon == "" {
			return nil, &ParseError{file, p.line, p.col, fmt.Sprintf("unknown key %q (want %s)", p.key, orList(allowed))}
		}
		if prev, dup := out[canon]; dup {
			return nil, &ParseError{file, p.line, p.col, fmt.Sprintf("duplicate key %s (first at line %d, column %d)", canon, prev.line, prev.col)}
		}
		out[canon] = p
	}
	return out, nil
}

func orList(words []string) string {
	switch len(words) {
	case 1:
		return words[0]
	case 2:
		return words[0] + " or " + words[1]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// expandAt expands a hostlist value, turning its errors into ParseErrors at
// the right column. used counts names expanded so far in the file.
func expandAt(file string, p kv, used *int) ([]string, []int, error) {
	names, offs, err := expandHostlist(p.val, *used)
	if err != nil {
		var he *hostlistError
		if errors.As(err, &he) {
			return nil, nil, p.valErr(file, he.off, fmt.Sprintf("%s: %s", p.key, he.msg))
		}
		return nil, nil, err
	}
	*used += len(names)
	return names, offs, nil
}

// checkRecordName validates a single switch or block name.
func checkRecordName(file string, p kv, what string, maxLen int) error {
	for i := 0; i < len(p.val); i++ {
		if !isNameByte(p.val[i]) {
			return p.valErr(file, i, fmt.Sprintf("invalid character %q in %s name %q (want letters, digits and -_.:+@; one name, not a list)", p.val[i], what, p.val))
		}
	}
	if maxLen > 0 && len(p.val) > maxLen {
		return p.valErr(file, 0, fmt.Sprintf("%s name %q is longer than %d characters", what, p.val, maxLen))
	}
	return nil
}

// otherPlugin explains a record that belongs to another topology plugin.
func otherPlugin(file string, p kv, want string) error {
	switch {
	case strings.EqualFold(p.key, "SwitchName"):
		return &ParseError{file, p.line, p.col, fmt.Sprintf("SwitchName belongs to the tree topology (topology/tree), not %s", want)}
	case strings.EqualFold(p.key, "BlockName"), strings.EqualFold(p.key, "BlockSizes"):
		return &ParseError{file, p.line, p.col, fmt.Sprintf("%s belongs to the block topology (topology/block), not %s", p.key, want)}
	case strings.EqualFold(p.key, "RingName"):
		return &ParseError{file, p.line, p.col, "RingName (topology/ring) is not supported"}
	}
	return nil
}

// SlurmTree is a parsed Slurm topology.conf for the topology/tree plugin:
// switches with either child switches or child nodes.
type SlurmTree struct {
	// File is the name given to ParseSlurmTree, used in messages.
	File string
	// Switches are in file order.
	Switches []SlurmSwitch
}

// SlurmSwitch is one SwitchName= line, with its lists expanded.
type SlurmSwitch struct {
	Name     string
	Switches []string // child switches, when this is not a leaf
	Nodes    []string // child nodes, when this is a leaf
	// LinkSpeed is kept verbatim; Slurm ignores it and so does gangway.
	LinkSpeed string
	Line      int
}

var treeKeys = []string{"SwitchName", "Switches", "Nodes", "LinkSpeed"}

// ParseSlurmTree parses Slurm's topology.conf in its tree form:
//
//	# comment
//	SwitchName=s0 Nodes=dev[0-5]
//	SwitchName=s1 Nodes=dev[6-11] LinkSpeed=100
//	SwitchName=s2 Switches=s[0-1]
//
// Keys are case-insensitive; Nodes and Switches take Slurm hostlist
// expressions (see ExpandHostlist); a trailing '\' continues a line. file
// names the input in errors, which are *ParseError with line and column:
// unknown or repeated keys, a switch defined twice, a child switch that is
// not defined, a switch with two parents, a cycle, a node under two
// switches, and a switch with both Switches and Nodes.
func ParseSlurmTree(r io.Reader, file string) (*SlurmTree, error) {
	recs, err := readRecords(r, file)
	if err != nil {
		return nil, err
	}
	t := &SlurmTree{File: file}
	defined := map[string]int{} // name -> index in t.Switches
	type ref struct {
		name      string
		line, col int
	}
	var childRefs [][]ref // per switch
	nodeAt := map[string]ref{}
	used := 0
	for _, rec := range recs {
		if !strings.EqualFold(rec[0].key, "SwitchName") {
			if err := otherPlugin(file, rec[0], "the tree topology"); err != nil {
				return nil, err
			}
			return nil, &ParseError{file, rec[0].line, rec[0].col, fmt.Sprintf("a line must start with SwitchName=, got %s=", rec[0].key)}
		}
		f, err := rec.fields(file, treeKeys)
		if err != nil {
			return nil, err
		}
		name := f["SwitchName"]
		if err := checkRecordName(file, name, "switch", maxSwitchName); err != nil {
			return nil, err
		}
		if i, dup := defined[name.val]; dup {
			return nil, name.valErr(file, 0, fmt.Sprintf("switch %q is defined twice (first on line %d)", name.val, t.Switches[i].Line))
		}
		sw := SlurmSwitch{Name: name.val, Line: name.line, LinkSpeed: f["LinkSpeed"].val}
		nodes, hasNodes := f["Nodes"]
		kids, hasKids := f["Switches"]
		if hasNodes && hasKids {
			later := nodes
			if kids.line > nodes.line || (kids.line == nodes.line && kids.col > nodes.col) {
				later = kids
			}
			return nil, &ParseError{file, later.line, later.col, fmt.Sprintf("switch %q has both Switches and Nodes; a switch holds either child switches or nodes", name.val)}
		}
		var refs []ref
		if hasKids {
			names, offs, err := expandAt(file, kids, &used)
			if err != nil {
				return nil, err
			}
			seen := map[string]bool{}
			for i, c := range names {
				if seen[c] {
					return nil, kids.valErr(file, offs[i], fmt.Sprintf("switch %q is listed twice under %q", c, name.val))
				}
				seen[c] = true
				if len(c) > maxSwitchName {
					return nil, kids.valErr(file, offs[i], fmt.Sprintf("switch name %q is longer than %d characters", c, maxSwitchName))
				}
				l, c2 := kids.valAt(offs[i])
				refs = append(refs, ref{c, l, c2})
			}
			sw.Switches = names
		}
		if hasNodes {
			names, offs, err := expandAt(file, nodes, &used)
			if err != nil {
				return nil, err
			}
			for i, n := range names {
				l, c := nodes.valAt(offs[i])
				at := ref{name.val, l, c}
				if prev, dup := nodeAt[n]; dup {
					if prev.name == name.val {
						return nil, &ParseError{file, at.line, at.col, fmt.Sprintf("node %q is listed twice under switch %q", n, name.val)}
					}
					return nil, &ParseError{file, at.line, at.col, fmt.Sprintf("node %q is under two leaf switches: %q (line %d) and %q", n, prev.name, prev.line, name.val)}
				}
				nodeAt[n] = at
			}
			sw.Nodes = names
		}
		defined[name.val] = len(t.Switches)
		t.Switches = append(t.Switches, sw)
		childRefs = append(childRefs, refs)
	}
	// References: defined, one parent each.
	parent := make([]int, len(t.Switches))
	for i := range parent {
		parent[i] = -1
	}
	parentRef := make([]ref, len(t.Switches))
	for i, refs := range childRefs {
		for _, c := range refs {
			j, ok := defined[c.name]
			if !ok {
				return nil, &ParseError{file, c.line, c.col, fmt.Sprintf("switch %q under %q is not defined (no SwitchName=%s line)", c.name, t.Switches[i].Name, c.name)}
			}
			if j == i {
				return nil, &ParseError{file, c.line, c.col, fmt.Sprintf("switch %q lists itself under Switches", c.name)}
			}
			if parent[j] >= 0 {
				return nil, &ParseError{file, c.line, c.col, fmt.Sprintf("switch %q has two parents: %q (line %d) and %q", c.name, t.Switches[parent[j]].Name, parentRef[j].line, t.Switches[i].Name)}
			}
			parent[j] = i
			parentRef[j] = c
		}
	}
	// Cycles: with one parent each, a cycle is a parent chain that loops.
	state := make([]uint8, len(t.Switches)) // 0 unvisited, 1 on the current chain, 2 done
	for start := range t.Switches {
		var chain []int
		i := start
		for i >= 0 && state[i] == 0 {
			state[i] = 1
			chain = append(chain, i)
			i = parent[i]
		}
		if i >= 0 && state[i] == 1 {
			k := slices.Index(chain, i)
			loop := chain[k:]
			first := slices.Min(loop)
			names := []string{t.Switches[first].Name}
			for j := parent[first]; j != first; j = parent[j] {
				names = append(names, t.Switches[j].Name)
			}
			names = append(names, t.Switches[first].Name)
			slices.Reverse(names) // parent first: each switch lists the next
			return nil, &ParseError{file, t.Switches[first].Line, 0, fmt.Sprintf("switch cycle: %s (each lists the next under Switches)", strings.Join(names, " -> "))}
		}
		for _, c := range chain {
			state[c] = 2
		}
	}
	return t, nil
}

// MarshalText writes the tree back in topology.conf form, one switch per
// line in the parsed order, with lists compressed by FormatHostlist.
func (t *SlurmTree) MarshalText() ([]byte, error) {
	var b strings.Builder
	for _, s := range t.Switches {
		b.WriteString("SwitchName=")
		b.WriteString(s.Name)
		if len(s.Switches) > 0 {
			b.WriteString(" Switches=")
			b.WriteString(FormatHostlist(s.Switches))
		}
		if len(s.Nodes) > 0 {
			b.WriteString(" Nodes=")
			b.WriteString(FormatHostlist(s.Nodes))
		}
		if s.LinkSpeed != "" {
			b.WriteString(" LinkSpeed=")
			b.WriteString(s.LinkSpeed)
		}
		b.WriteByte('\n')
	}
	return []byte(b.String()), nil
}

// SlurmBlocks is a parsed Slurm topology.conf for the topology/block
// plugin: named blocks of nodes and the block sizes Slurm aggregates them to.
type SlurmBlocks struct {
	// File is the name given to ParseSlurmBlocks, used in messages.
	File string
	// Blocks are in file order.
	Blocks []SlurmBlock
	// BlockSizes is the BlockSizes= list (base block size first, in nodes),
	// or nil when the file has none.
	BlockSizes []int
}

// SlurmBlock is one BlockName= line, with its node list expanded.
type SlurmBlock struct {
	Name  string
	Nodes []string
	Line  int
}

var blockKeys = []string{"BlockName", "Nodes"}

// ParseSlurmBlocks parses Slurm's topology.conf in its block form:
//
//	BlockName=rack1 Nodes=gb[001-018]
//	BlockName=rack2 Nodes=gb[019-036]
//	BlockSizes=18,36
//
// Errors are *ParseError with line and column: unknown or repeated keys, a
// block without Nodes, a block defined twice, a node in two blocks, a
// BlockSizes value that is not a positive integer, not increasing by a power
// of two over the one before it (Slurm's rule), or larger base size than a
// block's node count.
func ParseSlurmBlocks(r io.Reader, file string) (*SlurmBlocks, error) {
	recs, err := readRecords(r, file)
	if err != nil {
		return nil, err
	}
	bl := &SlurmBlocks{File: file}
	defined := map[string]int{}
	type at struct {
		block string
		line  int
	}
	nodeAt := map[string]at{}
	var sizes kv
	used := 0
	for _, rec := range recs {
		first := rec[0]
		switch {
		case strings.EqualFold(first.key, "BlockSizes"):
			if len(rec) > 1 {
				return nil, &ParseError{file, rec[1].line, rec[1].col, fmt.Sprintf("BlockSizes must be alone on its line, got %s=", rec[1].key)}
			}
			if bl.BlockSizes != nil {
				return nil, &ParseError{file, first.line, first.col, fmt.Sprintf("BlockSizes given twice (first on line %d)", sizes.line)}
			}
			vals, err := parseBlockSizes(file, first)
			if err != nil {
				return nil, err
			}
			bl.BlockSizes, sizes = vals, first
			continue
		case !strings.EqualFold(first.key, "BlockName"):
			if err := otherPlugin(file, first, "the block topology"); err != nil {
				return nil, err
			}
			return nil, &ParseError{file, first.line, first.col, fmt.Sprintf("a line must start with BlockName= or BlockSizes=, got %s=", first.key)}
		}
		f, err := rec.fields(file, blockKeys)
		if err != nil {
			return nil, err
		}
		name := f["BlockName"]
		if err := checkRecordName(file, name, "block", 0); err != nil {
			return nil, err
		}
		if i, dup := defined[name.val]; dup {
			return nil, name.valErr(file, 0, fmt.Sprintf("block %q is defined twice (first on line %d)", name.val, bl.Blocks[i].Line))
		}
		nodes, ok := f["Nodes"]
		if !ok {
			return nil, &ParseError{file, name.line, 0, fmt.Sprintf("block %q has no Nodes=", name.val)}
		}
		names, offs, err := expandAt(file, nodes, &used)
		if err != nil {
			return nil, err
		}
		for i, n := range names {
			if prev, dup := nodeAt[n]; dup {
				msg := fmt.Sprintf("node %q is in two blocks: %q (line %d) and %q", n, prev.block, prev.line, name.val)
				if prev.block == name.val {
					msg = fmt.Sprintf("node %q is listed twice in block %q", n, name.val)
				}
				return nil, nodes.valErr(file, offs[i], msg)
			}
			nodeAt[n] = at{name.val, name.line}
		}
		defined[name.val] = len(bl.Blocks)
		bl.Blocks = append(bl.Blocks, SlurmBlock{Name: name.val, Nodes: names, Line: name.line})
	}
	if bl.BlockSizes != nil {
		base := bl.BlockSizes[0]
		for _, b := range bl.Blocks {
			if len(b.Nodes) < base {
				return nil, &ParseError{file, b.Line, 0, fmt.Sprintf("block %q has %d nodes, fewer than the base block size %d (BlockSizes on line %d)", b.Name, len(b.Nodes), base, sizes.line)}
			}
		}
	}
	return bl, nil
}

func parseBlockSizes(file string, p kv) ([]int, error) {
	var out []int
	off := 0
	for part := range strings.SplitSeq(p.val, ",") {
		at := off
		off += len(part) + 1
		v, err := strconv.Atoi(part)
		if err != nil || v <= 0 || v > maxExpand {
			return nil, p.valErr(file, at, fmt.Sprintf("BlockSizes entry %q: want a positive number of nodes", part))
		}
		if n := len(out); n > 0 {
			prev := out[n-1]
			if v <= prev || v%prev != 0 || bits.OnesCount(uint(v/prev)) != 1 {
				return nil, p.valErr(file, at, fmt.Sprintf("BlockSizes entry %d must be a power-of-two multiple (2x, 4x, ...) of the entry before it, %d", v, prev))
			}
		}
		out = append(out, v)
	}
	return out, nil
}

// MarshalText writes the blocks back in topology.conf form.
func (bl *SlurmBlocks) MarshalText() ([]byte, error) {
	var b strings.Builder
	for _, blk := range bl.Blocks {
		fmt.Fprintf(&b, "BlockName=%s Nodes=%s\n", blk.Name, FormatHostlist(blk.Nodes))
	}
	if bl.BlockSizes != nil {
		parts := make([]string, len(bl.BlockSizes))
		for i, v := range bl.BlockSizes {
			parts[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(&b, "BlockSizes=%s\n", strings.Join(parts, ","))
	}
	return []byte(b.String()), nil
}
