package api

import (
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
)

// Label keys and values are Kubernetes': a key is a name of at most 63
// characters, alphanumeric at both ends with -, _ and . inside, after an
// optional DNS-subdomain prefix and a slash (example.com/team); a value is
// empty or such a name.
var (
	labelName   = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
	labelPrefix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// LabelKeyError says what is wrong with a label key, or is "" if nothing.
func LabelKeyError(k string) string {
	prefix, name, hasPrefix := strings.Cut(k, "/")
	if !hasPrefix {
		name, prefix = prefix, ""
	}
	switch {
	case k == "":
		return "empty key"
	case hasPrefix && (prefix == "" || len(prefix) > 253 || !labelPrefix.MatchString(prefix)):
		return fmt.Sprintf("key %q: prefix %q must be a DNS subdomain (lower-case alphanumerics, - and ., at most 253 characters)", k, prefix)
	case len(name) > 63:
		return fmt.Sprintf("key %q: name is %d characters; at most 63", k, len(name))
	case !labelName.MatchString(name):
		return fmt.Sprintf("key %q: name must be alphanumeric at both ends, with -, _ and . inside", k)
	}
	return ""
}

// LabelValueError says what is wrong with a label value, or is "" if
// nothing.
func LabelValueError(v string) string {
	switch {
	case v == "":
		return ""
	case len(v) > 63:
		return fmt.Sprintf("value %q is %d characters; at most 63", v, len(v))
	case !labelName.MatchString(v):
		return fmt.Sprintf("value %q must be empty or alphanumeric at both ends, with -, _ and . inside", v)
	}
	return ""
}

// checkJobLabels records on field each label that is not Kubernetes'.
func checkJobLabels(fe *FieldErrors, field string, labels map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if msg := LabelKeyError(k); msg != "" {
			fe.Add(field, "%s", msg)
		} else if msg := LabelValueError(labels[k]); msg != "" {
			fe.Add(field+"."+k, "%s", msg)
		}
	}
}

// ErrSelector is what every ParseSelector error wraps.
var ErrSelector = errors.New("label selector")

// SelectorOp is how a selector term tests a label.
type SelectorOp string

// The operators of a selector's terms (kubectl's equality-based ones).
const (
	SelectEquals    SelectorOp = "="
	SelectNotEquals SelectorOp = "!="
	SelectExists    SelectorOp = "exists"
	SelectNotExists SelectorOp = "!exists"
)

// SelectorTerm is one comma-separated term of a selector.
type SelectorTerm struct {
	Key   string
	Op    SelectorOp
	Value string
}

// Selector is a parsed label selector: every term must hold. The empty
// selector selects everything.
type Selector []SelectorTerm

// ParseSelector reads kubectl's equality-based selector: terms separated
// by commas, each key=value (or key==value), key!=value, key (has the
// label) or !key (has not). Its errors wrap ErrSelector and name the bad
// term.
func ParseSelector(s string) (Selector, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var sel Selector
	for _, raw := range strings.Split(s, ",") {
		term := strings.TrimSpace(raw)
		t, err := parseTerm(term)
		if err != nil {
			return nil, fmt.Errorf("%w: term %q: %s", ErrSelector, term, err)
		}
		sel = append(sel, t)
	}
	return sel, nil
}

func parseTerm(term string) (SelectorTerm, error) {
	if term == "" {
		return SelectorTerm{}, errors.New("empty (two commas, or one at an end)")
	}
	if strings.ContainsAny(term, "()") || strings.Contains(term, " in ") || strings.Contains(term, " notin ") {
		return SelectorTerm{}, errors.New("set-based terms (in, notin) are not taken: write key=value, key!=value, key or !key")
	}
	var t SelectorTerm
	switch {
	case strings.Contains(term, "!="):
		t.Key, t.Value, _ = strings.Cut(term, "!=")
		t.Op = SelectNotEquals
	case strings.Contains(term, "=="):
		t.Key, t.Value, _ = strings.Cut(term, "==")
		t.Op = SelectEquals
	case strings.Contains(term, "="):
		t.Key, t.Value, _ = strings.Cut(term, "=")
		t.Op = SelectEquals
	case strings.HasPrefix(term, "!"):
		t.Key, t.Op = strings.TrimSpace(term[1:]), SelectNotExists
	default:
		t.Key, t.Op = term, SelectExists
	}
	t.Key, t.Value = strings.TrimSpace(t.Key), strings.TrimSpace(t.Value)
	if msg := LabelKeyError(t.Key); msg != "" {
		return t, errors.New(msg)
	}
	if msg := LabelValueError(t.Value); msg != "" {
		return t, errors.New(msg)
	}
	return t, nil
}

// Matches reports whether labels satisfy every term.
func (s Selector) Matches(labels map[string]string) bool {
	for _, t := range s {
		v, ok := labels[t.Key]
		switch t.Op {
		case SelectEquals:
			if !ok || v != t.Value {
				return false
			}
		case SelectNotEquals:
			if ok && v == t.Value {
				return false
			}
		case SelectExists:
			if !ok {
				return false
			}
		case SelectNotExists:
			if ok {
				return false
			}
		}
	}
	return true
}

// String writes the selector back as ParseSelector reads it.
func (s Selector) String() string {
	terms := make([]string, len(s))
	for i, t := range s {
		switch t.Op {
		case SelectExists:
			terms[i] = t.Key
		case SelectNotExists:
			terms[i] = "!" + t.Key
		default:
			terms[i] = t.Key + string(t.Op) + t.Value
		}
	}
	return strings.Join(terms, ",")
}
