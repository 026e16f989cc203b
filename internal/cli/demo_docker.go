package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	gwcontainer "github.com/gangway/gangway/internal/node/container"
)

// The demo's drivers: ranks as bare processes, or in Docker containers
// (spec.image) of an image the demo makes from its own executable.
const (
	driverExec   = "exec"
	driverDocker = "docker"
)

// demoInImage is where the demo's image holds this executable: the ranks'
// command in a container.
const demoInImage = "/gangway"

// demoImage makes the demo's image in this machine's Docker engine, from a
// root filesystem holding this executable (exe) and the shared libraries
// it needs (container.ProgramImage): nothing is pulled and no registry is
// reached; an unchanged gangway makes it once. Without an engine the error
// says what to start.
func demoImage(ctx context.Context, exe string, say func(string, ...any)) (string, error) {
	if why := gwcontainer.Available(ctx, ""); why != "" {
		return "", fmt.Errorf("--driver docker needs a Docker engine on this machine: %s; start one (`sudo systemctl start docker`, or `sudo dockerd &`) or run the demo without --driver docker", why)
	}
	ref, made, err := gwcontainer.ProgramImage(ctx, exe, demoInImage, "gangway-demo")
	if err != nil {
		return "", fmt.Errorf("demo image: %w", err)
	}
	if made {
		say("made image %s in the Docker engine from this gangway and the libraries it links (nothing pulled)", ref)
	} else {
		say("image %s already in the Docker engine (this gangway, made earlier)", ref)
	}
	return ref, nil
}

// sweepContainers removes the containers of the demo agent whose data
// directory is dir (a node dying takes its containers with it; a demo
// that ends leaves none), and returns how many it removed.
func sweepContainers(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "instance-id"))
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, _ := gwcontainer.Sweep(ctx, "", strings.TrimSpace(string(b)), nil)
	return len(l)
}
