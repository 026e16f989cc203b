package xid

import (
	"context"
	"errors"
)

// Fallback returns a Source that reads both sources at every Read and
// hands on primary's events while primary reads, otherwise fallback's.
//
// The agent pairs the kernel log (primary) with NVML's event set
// (fallback). Both report the same Xids, so taking events from one source
// per Read never counts an Xid twice. The kernel log comes first because
// it carries the driver's text, which classifies NVLink5 Xids (144 to
// 150, fatal or not) and Xid 154 (the recovery action); NVML's events
// give only the code. NVML's take over where the log cannot be read:
// /dev/kmsg needs root or CAP_SYSLOG and is often hidden from containers.
// The fallback is read and its events dropped even while primary works,
// so that it holds no backlog of stale Xids for the day primary fails.
//
// Close closes whichever of the two has a Close method.
func Fallback(primary, fallback Source) Source {
	return &fallbackSource{primary: primary, fallback: fallback}
}

type fallbackSource struct {
	primary, fallback Source
}

func (s *fallbackSource) Read(ctx context.Context) ([]Event, error) {
	events, perr := s.primary.Read(ctx)
	fevents, ferr := s.fallback.Read(ctx)
	if perr == nil {
		return events, nil
	}
	// primary's events from before its error are fallback's too.
	if ferr != nil {
		return fevents, errors.Join(perr, ferr)
	}
	return fevents, nil
}

func (s *fallbackSource) Close() error {
	var errs []error
	for _, src := range []Source{s.primary, s.fallback} {
		if c, ok := src.(interface{ Close() error }); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
