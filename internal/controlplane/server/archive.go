package server

import (
	"github.com/gangway/gangway/internal/controlplane/controller"
	"github.com/gangway/gangway/internal/controlplane/jobarchive"
)

// openArchive returns the job archive of cfg, nil without one. It reads
// nothing: the first look-up or append builds its index.
func openArchive(cfg jobarchive.Config) *jobarchive.Archive {
	if cfg.Path == "" {
		return nil
	}
	return jobarchive.New(cfg)
}

// jobArchive is the archive for the controller: a nil interface, not a
// nil pointer, without one.
func (s *Server) jobArchive() controller.JobArchive {
	if s.archive == nil {
		return nil
	}
	return s.archive
}
