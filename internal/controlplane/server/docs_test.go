package server

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/planner"
)

// TestDocumentedSpecsAdmitted: every job and deployment spec in the README,
// docs/ and the examples' READMEs passes the server's whole admission
// (decoding, validation, checkpoint roots, size, capacity, the planner's
// check of the grid) on the cluster the README sets up: 16 nodes of 8
// H100s under leaf l1, --checkpoint-root /shared/ckpt.
func TestDocumentedSpecsAdmitted(t *testing.T) {
	docs, _ := filepath.Glob("../../../docs/*.md")
	ex, _ := filepath.Glob("../../../examples/*/README.md")
	docs = append(append(docs, ex...), "../../../README.md")
	nodes := h100Nodes(16)
	for _, n := range nodes {
		n.Labels = map[string]string{"leaf": "l1"}
		n.CPUs, n.MemoryBytes = 224, 2<<40
	}
	block := regexp.MustCompile("(?s)```(?:ya?ml|json)\n(.*?)```")
	n := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range block.FindAllSubmatch(b, -1) {
			if regexp.MustCompile(`(?m)^\s*"?keys"?:`).Match(m[1]) {
				continue // a gateway key file (internal/inference/gateway tests it)
			}
			if regexp.MustCompile(`(?m)^scrape_configs:`).Match(m[1]) {
				continue // Prometheus's configuration (internal/cli's TestPrometheusScrapesTheCluster checks it)
			}
			n++
			if regexp.MustCompile(`(?m)^\s*"?engine"?:`).Match(m[1]) {
				if _, err := api.DecodeDeploymentSpec(m[1]); err != nil {
					t.Errorf("%s: block %d: %v\n%s", doc, i+1, err, m[1])
				}
				continue
			}
			spec, err := api.DecodeJobSpec(m[1])
			if err == nil {
				err = admitCheckpointDir(&spec, []string{"/shared/ckpt"})
			}
			if err == nil {
				err = admitSize(&spec)
			}
			if err == nil {
				err = checkCapacity(&spec, nodes)
			}
			if err == nil {
				err = admitParallelism(&spec, nodes, planner.DefaultCatalog())
			}
			if err != nil {
				t.Errorf("%s: block %d is refused: %v\n%s", doc, i+1, err, m[1])
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d specs; the README has a job and a deployment", n)
	}
}
