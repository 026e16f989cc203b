// Command gangway is the GPU cluster orchestrator: control plane, node agent
// and user CLI in one binary.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gangway: under construction")
	os.Exit(2)
}
