package topology

// Selects reports whether a node with labels matches a selector: every
// eq label equal, and every in label one of its listed values. An empty
// selector matches every node. This is the plain form of the match; the
// scheduler answers the same question for all nodes at once from an index
// of label values (scheduler.Pass.selector), and its tests check it
// against this.
func Selects(eq map[string]string, in map[string][]string, labels map[string]string) bool {
	for k, v := range eq {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for k, vs := range in {
		got, ok := labels[k]
		if !ok {
			return false
		}
		found := false
		for _, v := range vs {
			if v == got {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}
