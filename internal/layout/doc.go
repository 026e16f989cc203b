// Package layout holds the rules of gangway's package tree as data and the
// tests that keep the tree to them: which tier each package belongs to and
// which tiers it may import, that every package has a doc comment whose
// "It imports …" sentence agrees with what the package really imports,
// that the node's rank supervisor and the user's API client never link
// the etcd server, and that no control-plane file outgrows a reader.
//
// It has no code of its own to import; its tests run the go tool.
package layout
