// Package wait polls a condition until it holds: the one loop the demo, the
// benchmarks and the multi-host tests all need while a cluster converges.
//
// It imports only the standard library.
package wait

import (
	"context"
	"time"
)

// Until calls cond at once and then every interval until it returns true
// (nil), an error (that error), or ctx ends (ctx's error).
func Until(ctx context.Context, interval time.Duration, cond func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
