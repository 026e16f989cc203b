package gpucheck

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/gangway/gangway/internal/api"
)

// NVLinkCheck is the "nvlink" check. It remembers, per link, whether it
// has seen the link up and its last error count.
type NVLinkCheck struct {
	r    NVLinkReader
	gpus int

	mu    sync.Mutex // guards links
	links map[[2]int]linkMemory
}

type linkMemory struct {
	wasUp  bool
	errors uint64
}

// NewNVLinkCheck returns the nvlink check: fatal, needing a reset, when
// a link it saw up is down (NCCL traffic over it stalls, and a reset
// retrains it); warn when a link was down from the start (the check
// cannot tell a fault from a board wired that way) or its error counters
// rose since the last run.
func NewNVLinkCheck(r NVLinkReader, gpus int) *NVLinkCheck {
	return &NVLinkCheck{r: r, gpus: gpus, links: map[[2]int]linkMemory{}}
}

// Name returns "nvlink".
func (c *NVLinkCheck) Name() string { return "nvlink" }

// Run reads every GPU's links.
func (c *NVLinkCheck) Run(ctx context.Context) []api.HealthCheck {
	return perGPU(ctx, c.Name(), c.gpus, func(gpu int) api.HealthCheck {
		links, err := c.r.NVLinks(ctx, gpu)
		if err != nil {
			return failed("NVLink state", err)
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		var lost, neverUp, rising []string
		for _, l := range links {
			key := [2]int{gpu, l.Index}
			m, seen := c.links[key]
			switch {
			case !l.Up && m.wasUp:
				lost = append(lost, fmt.Sprint(l.Index))
			case !l.Up:
				neverUp = append(neverUp, fmt.Sprint(l.Index))
			}
			if seen && l.Errors > m.errors {
				rising = append(rising, fmt.Sprintf("%d (+%d)", l.Index, l.Errors-m.errors))
			}
			c.links[key] = linkMemory{wasUp: m.wasUp || l.Up, errors: l.Errors}
		}
		var why []string
		if len(lost) > 0 {
			why = append(why, "links down that were up: "+strings.Join(lost, ", "))
		}
		if len(neverUp) > 0 {
			why = append(why, "links down since the check began: "+strings.Join(neverUp, ", "))
		}
		if len(rising) > 0 {
			why = append(why, "link errors rising: "+strings.Join(rising, ", "))
		}
		switch {
		case len(lost) > 0:
			return api.HealthCheck{Status: api.CheckFatal, Action: api.ActionResetGPU, Message: strings.Join(why, "; ")}
		case len(why) > 0:
			return api.HealthCheck{Status: api.CheckWarn, Action: api.ActionCount, Message: strings.Join(why, "; ")}
		}
		return ok
	})
}
