package server

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// applyDefaults fills what was left zero.
func (c *Config) applyDefaults() {
	if c.HealthReturn == 0 {
		c.HealthReturn = DefaultHealthReturn
	}
	if c.LemonFaults <= 0 {
		c.LemonFaults = 3
	}
	if c.LemonWindow <= 0 {
		c.LemonWindow = 24 * time.Hour
	}
	c.StragglerAction = cmp.Or(c.StragglerAction, StragglerReport)
	c.StragglerFactor = cmp.Or(c.StragglerFactor, DefaultStragglerFactor)
	c.StragglerWindow = cmp.Or(c.StragglerWindow, DefaultStragglerWindow)
	if c.NodeTimeout <= 0 {
		c.NodeTimeout = DefaultNodeTimeout
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.CheckpointRoot == "" && c.DataDir != "" {
		c.CheckpointRoot = filepath.Join(c.DataDir, "checkpoints")
	}
	// Absolute, as agents in other directories and the report screen
	// (which compares absolute paths) need it.
	if abs, err := filepath.Abs(c.CheckpointRoot); err == nil && c.CheckpointRoot != "" {
		c.CheckpointRoot = abs
	}
	if len(c.CheckpointDirRoots) == 0 && c.CheckpointRoot != "" {
		c.CheckpointDirRoots = []string{c.CheckpointRoot}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	if c.NodeCertTTL <= 0 {
		c.NodeCertTTL = DefaultNodeCertTTL
	}
	if c.AuditLog == "" && c.DataDir != "" {
		c.AuditLog = filepath.Join(c.DataDir, "audit.log")
	}
	if c.AuditKeep <= 0 {
		c.AuditKeep = 10000
	}
	if c.APIRate == 0 {
		c.APIRate = DefaultAPIRate
	}
	if c.APIBurst <= 0 {
		c.APIBurst = int(2 * max(c.APIRate, 1))
	}
}

// Validate reports the first setting that cannot work, named by the flag
// of `gangway server` that sets it. Zero values are read as their
// defaults.
func (c Config) Validate() error {
	c.applyDefaults()
	switch {
	case c.DataDir == "" && len(c.EtcdEndpoints) == 0:
		return errors.New("server: --data-dir is required with the embedded store")
	case c.CheckpointRoot == "":
		return errors.New("server: --checkpoint-root is required with an external etcd")
	case c.HeartbeatInterval*2 > c.NodeTimeout:
		return fmt.Errorf("server: --node-timeout %s must be at least twice --heartbeat-interval %s", c.NodeTimeout, c.HeartbeatInterval)
	case c.MaxOutage < 0:
		return fmt.Errorf("server: --max-outage %s is negative", c.MaxOutage)
	case c.JobRetention < 0:
		return fmt.Errorf("server: --job-retention %s is negative (0 keeps finished jobs)", c.JobRetention)
	case c.MaxFinishedJobs < 0:
		return fmt.Errorf("server: --max-finished-jobs %d is negative (0: no limit)", c.MaxFinishedJobs)
	case c.RetentionTick < 0:
		return fmt.Errorf("server: retention tick %s is negative", c.RetentionTick)
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("server: give --tls-cert and --tls-key together")
	case (c.TLSCA == "") != (c.TLSCAKey == ""):
		return errors.New("server: give --tls-ca and --tls-ca-key together (the CA key signs node certificates)")
	case c.InitialCluster != "" && len(c.EtcdEndpoints) > 0:
		return errors.New("server: --initial-cluster forms an embedded etcd of several members; with --etcd-endpoints there is none")
	case c.InitialCluster != "" && (c.EtcdName == "" || c.EtcdPeerAddr == ""):
		return errors.New("server: --initial-cluster needs --etcd-name (this member's name in it) and --etcd-peer-addr (where the others reach it)")
	case c.InitialCluster != "" && c.TLSCA == "":
		return errors.New("server: replicas must share one cluster CA: give each --tls-ca and --tls-ca-key (make one with: gangway ca create DIR)")
	case c.DataDir == "" && c.TLSCA == "":
		return errors.New("server: --data-dir (where the cluster CA is made) or --tls-ca is required")
	case c.Preflight.MinNodes < 0:
		return fmt.Errorf("server: --preflight-min-nodes %d: want 0 (no preflight) or more", c.Preflight.MinNodes)
	case c.Preflight.MinRatio < 0 || c.Preflight.MinRatio >= 1:
		return fmt.Errorf("server: --preflight-min-ratio %g: want a fraction of the median between 0 and 1", c.Preflight.MinRatio)
	case !slices.Contains(stragglerActions, c.StragglerAction):
		return fmt.Errorf("server: --straggler-action %q: want one of %s", c.StragglerAction, strings.Join(stragglerActions, ", "))
	case c.StragglerFactor <= 1 || c.StragglerWindow < 0:
		return fmt.Errorf("server: --straggler-factor %g must be above 1 and --straggler-window %s not negative", c.StragglerFactor, c.StragglerWindow)
	}
	return c.JobArchive.Validate()
}
