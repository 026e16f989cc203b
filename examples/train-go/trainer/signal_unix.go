//go:build unix

package trainer

import (
	"os"
	"os/signal"
	"syscall"
)

// notifyCheckpoint delivers SIGUSR1 ("checkpoint now") to ch without
// blocking until stop is called.
func notifyCheckpoint(ch chan<- struct{}) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR1)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() { // stopped and joined by stop
		defer close(exited)
		for {
			select {
			case <-sig:
				select {
				case ch <- struct{}{}:
				default: // a request is already pending
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(done)
		<-exited
	}
}
