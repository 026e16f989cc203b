// Package version is the gangway release this binary was built from: the
// CLI prints it and the API client sends it as its User-Agent.
//
// It imports nothing.
package version

// Version is set at build time with
// -ldflags "-X github.com/gangway/gangway/internal/base/version.Version=...".
var Version = "dev"
