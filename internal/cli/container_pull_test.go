package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/gangway/gangway/internal/api"
)

// fakeRegistry serves one image, repo:tag, holding the file at path as
// /train, over the registry API's plain-HTTP form on loopback (which the
// engine trusts without TLS), sending its layer slowly, over about
// layerTime, so that a pull takes that long.
func fakeRegistry(t *testing.T, repo, tag, path string, layerTime time.Duration) string {
	t.Helper()
	bin, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	if err := tw.WriteHeader(&tar.Header{Name: "train", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	tw.Write(bin)
	tw.Close()
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	zw.Write(raw.Bytes())
	zw.Close()
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	layer := gz.Bytes()
	config, _ := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{digest(raw.Bytes())}}})
	manifest, _ := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
		"config": map[string]any{"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": digest(config)},
		"layers": []map[string]any{{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer), "digest": digest(layer)}}})
	blobs := map[string][]byte{digest(config): config, digest(layer): layer}
	mux := http.NewServeMux()
	mux.HandleFunc("/v2/", func(w http.ResponseWriter, r *http.Request) {
		p := strings.TrimPrefix(r.URL.Path, "/v2/")
		switch {
		case p == "":
			w.WriteHeader(http.StatusOK)
		case p == repo+"/manifests/"+tag || p == repo+"/manifests/"+digest(manifest):
			w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
			w.Header().Set("Docker-Content-Digest", digest(manifest))
			w.Header().Set("Content-Length", fmt.Sprint(len(manifest)))
			if r.Method != http.MethodHead {
				w.Write(manifest)
			}
		case strings.HasPrefix(p, repo+"/blobs/") && blobs[strings.TrimPrefix(p, repo+"/blobs/")] != nil:
			b := blobs[strings.TrimPrefix(p, repo+"/blobs/")]
			w.Header().Set("Content-Length", fmt.Sprint(len(b)))
			w.Header().Set("Docker-Content-Digest", strings.TrimPrefix(p, repo+"/blobs/"))
			if r.Method == http.MethodHead {
				return
			}
			const chunks = 40
			step := (len(b) + chunks - 1) / chunks
			for i := 0; i < len(b); i += step {
				w.Write(b[i:min(i+step, len(b))])
				w.(http.Flusher).Flush()
				if len(b) > len(config) {
					time.Sleep(layerTime / chunks)
				}
			}
		default:
			http.NotFound(w, r)
		}
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// TestDescribeJobShowsImagePull: while a container rank's image is being
// pulled, `gangway describe job` shows the rank pulling and how far the
// pull has got; then the job runs from the pulled image.
func TestDescribeJobShowsImagePull(t *testing.T) {
	cli := needDocker(t)
	host := fakeRegistry(t, "gangway-pull-test", "1", filepath.Join(os.TempDir(), "gangway-test-train"), 5*time.Second)
	ref := host + "/gangway-pull-test:1"
	t.Cleanup(func() { _, _ = cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true}) })
	cl := startCluster(t, 1, 2)
	id := cl.submitYAML(fmt.Sprintf(`
name: pulled
ranks: 1
image: %s
imagePullPolicy: Always
command: [/train, --steps, "5", --step-delay, 0s]
`, ref))
	var seen string
	cl.wait(60*time.Second, "describe job to show the pull", func() bool {
		out, _, _ := cl.run("describe", "job", id)
		if strings.Contains(out, "PullingImage") && strings.Contains(out, "Pulling: rank 0: image "+ref+" on node n1: ") &&
			strings.Contains(out, "layers done, ") && strings.Contains(out, "downloaded") {
			seen = out
			return true
		}
		return false
	})
	t.Logf("describe job while pulling:\n%s", seen)
	d := cl.waitPhase(id, api.JobSucceeded, 60*time.Second)
	if rs := d.Ranks; len(rs) != 1 || rs[0].Pulling != "" {
		t.Errorf("ranks = %+v; want one, no longer pulling", rs)
	}
}
