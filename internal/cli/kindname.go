package cli

import "strings"

// kinds are the kinds whose kind/name forms (kubectl's job/7, node/n1)
// the commands that take KIND NAME read.
var kinds = map[string]bool{
	"job": true, "jobs": true, "node": true, "nodes": true,
	"deployment": true, "deployments": true, "deploy": true,
}

// splitKindNames rewrites every kind/name argument, its kind one of kinds,
// into two, kind and name, so that `describe job/7` reads as `describe
// job 7`. Other arguments (flags, their values, URLs) are left as they
// are.
func splitKindNames(args []string) []string {
	out := make([]string, 0, len(args)+1)
	for _, a := range args {
		if k, name, ok := strings.Cut(a, "/"); ok && kinds[k] && name != "" && !strings.HasPrefix(a, "-") {
			out = append(out, k, name)
			continue
		}
		out = append(out, a)
	}
	return out
}

// jobIDs strips job/ (or jobs/) from IDs given as kind/name.
func jobIDs(ids []string) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		if k, name, ok := strings.Cut(id, "/"); ok && (k == "job" || k == "jobs") && name != "" {
			id = name
		}
		out[i] = id
	}
	return out
}
