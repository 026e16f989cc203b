package container

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"
)

// File is one regular file of an image ImportImage makes.
type File struct {
	Name string // relative to the root: "bin/trainer"
	Mode int64
	Body []byte
}

// ImportImage makes image ref in the node's engine from files alone (as
// `docker import` of a tar does), with /tmp: for static programs, with no
// registry and nothing to download (the tests, `gangway demo --driver
// docker`).
func ImportImage(ctx context.Context, ref string, files []File) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"tmp/", "etc/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Mode: 0o1777, Typeflag: tar.TypeDir}); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.Name, Mode: f.Mode, Size: int64(len(f.Body)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.Body); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	cli, err := engine("")
	if err != nil {
		return err
	}
	defer cli.Close()
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{})
	if err != nil {
		return fmt.Errorf("import image %s: %w", ref, err)
	}
	defer rc.Close()
	_, err = io.Copy(io.Discard, rc)
	return err
}

// Available says why the Docker engine at host ("": $DOCKER_HOST, else
// the default socket) cannot be used ("" when it can): for tests and
// commands that need one, to skip or say so, and for an agent's sweep.
func Available(ctx context.Context, host string) string {
	if _, err := os.Stat("/var/run/docker.sock"); err != nil && os.Getenv("DOCKER_HOST") == "" && host == "" {
		return "no Docker engine here (/var/run/docker.sock absent and $DOCKER_HOST unset)"
	}
	cli, err := engine(host)
	if err != nil {
		return err.Error()
	}
	defer cli.Close()
	if err := ping(ctx, cli, "this machine"); err != nil {
		return err.Error()
	}
	return ""
}

// HasImage reports whether the node's engine holds image ref.
func HasImage(ctx context.Context, ref string) (bool, error) {
	cli, err := engine("")
	if err != nil {
		return false, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	switch _, err := cli.ImageInspect(ctx, ref); {
	case err == nil:
		return true, nil
	case cerrdefs.IsNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("look up image %s: %w", ref, err)
	}
}
