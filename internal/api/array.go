package api

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxArrayTasks bounds one array submission (Slurm's default MaxArraySize
// is 1,001).
const MaxArrayTasks = 10000

// ArraySpec is a parsed job array request: the task indices in the order
// given, and how many may run at once (0: no limit).
type ArraySpec struct {
	Indices []int
	Limit   int
}

// ParseArray parses Slurm's --array syntax: comma-separated indices and
// ranges, a range optionally with a step ("0-15:4"), and an optional
// "%N" suffix bounding how many tasks run at once: "0-999", "1,3,5-9",
// "0-99%10". Indices are 0..MaxArrayTasks*10 and may not repeat.
func ParseArray(s string) (ArraySpec, error) {
	bad := func(format string, a ...any) (ArraySpec, error) {
		return ArraySpec{}, fmt.Errorf("array %q: %s (want indices and ranges such as 0-999, 1,3,5-9, 0-15:4, optionally %%N to run at most N at once)", s, fmt.Sprintf(format, a...))
	}
	var out ArraySpec
	body := strings.TrimSpace(s)
	if i := strings.IndexByte(body, '%'); i >= 0 {
		n, err := strconv.Atoi(body[i+1:])
		if err != nil || n < 1 {
			return bad("the limit after %% must be a positive number")
		}
		out.Limit = n
		body = body[:i]
	}
	if body == "" {
		return bad("no indices")
	}
	const maxIndex = MaxArrayTasks * 10
	num := func(t string) (int, bool) {
		n, err := strconv.Atoi(t)
		return n, err == nil && n >= 0 && n <= maxIndex && t == strconv.Itoa(n)
	}
	seen := map[int]bool{}
	for _, part := range strings.Split(body, ",") {
		part = strings.TrimSpace(part)
		lo, hi, step := part, part, "1"
		if i := strings.IndexByte(part, ':'); i >= 0 {
			part, step = part[:i], part[i+1:]
			lo, hi = part, part
		}
		if i := strings.IndexByte(part, '-'); i > 0 {
			lo, hi = part[:i], part[i+1:]
		}
		a, okA := num(lo)
		b, okB := num(hi)
		st, okS := num(step)
		switch {
		case !okA || !okB:
			return bad("%q is not an index or a range of indices 0..%d", part, maxIndex)
		case !okS || st < 1:
			return bad("step %q must be a positive number", step)
		case b < a:
			return bad("range %q ends before it starts", part)
		}
		for k := a; k <= b; k += st {
			if seen[k] {
				return bad("index %d given twice", k)
			}
			if len(out.Indices) == MaxArrayTasks {
				return bad("more than %d tasks", MaxArrayTasks)
			}
			seen[k] = true
			out.Indices = append(out.Indices, k)
		}
	}
	return out, nil
}

// String writes the spec back in the same syntax, ranges merged.
func (a ArraySpec) String() string {
	idx := slices.Clone(a.Indices)
	slices.Sort(idx)
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.Itoa(idx[i]))
		} else {
			parts = append(parts, strconv.Itoa(idx[i])+"-"+strconv.Itoa(idx[j]))
		}
		i = j + 1
	}
	s := strings.Join(parts, ",")
	if a.Limit > 0 {
		s += "%" + strconv.Itoa(a.Limit)
	}
	return s
}

// ArrayTask is a job's place in the array it was submitted as.
type ArrayTask struct {
	// ID is the array's id: the id of its first task.
	ID string `json:"id"`
	// Index is this task's array index (GANGWAY_ARRAY_TASK_ID).
	Index int `json:"index"`
	// Count is how many tasks the array has; their job ids are ID to
	// ID+Count-1.
	Count int `json:"count"`
	// Limit is how many of the array's tasks may run at once (0: any).
	Limit int `json:"limit,omitempty"`
}

// ArraySubmission is what POST /v1/jobs answers for a spec with an array.
type ArraySubmission struct {
	ArrayID string   `json:"arrayId"`
	Count   int      `json:"count"`
	Jobs    []string `json:"jobs"`
}
