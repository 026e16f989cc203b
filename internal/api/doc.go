// Package api holds gangway's wire types: jobs, nodes, queues,
// deployments, assignments and the reports agents send, with their
// defaults, validation and strict decoding; and the bodies of /v1 that are
// no resource (the lists, the error body, array answers, the usage
// report). The server writes them and internal/api/client, the Go
// client, reads them.
//
// It does no I/O; every other package may import it. It imports the
// standard library, github.com/goccy/go-yaml and
// github.com/distribution/reference (image names), nothing of gangway's.
package api
