package wait

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	n := 0
	if err := Until(context.Background(), time.Millisecond, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("Until = %v after %d calls; want nil after 3", err, n)
	}
	boom := errors.New("boom")
	if err := Until(context.Background(), time.Millisecond, func() (bool, error) { return false, boom }); !errors.Is(err, boom) {
		t.Fatalf("Until = %v; want the condition's error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	if err := Until(ctx, time.Millisecond, func() (bool, error) { return false, nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Until = %v; want the context's error", err)
	}
}
