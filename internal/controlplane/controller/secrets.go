package controller

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gangway/gangway/internal/api"
)

// maxSecretBytes bounds one secret file.
const maxSecretBytes = 64 << 10

// ReadSecret reads the secret file of user under dir: dir/user/file, with
// no link followed out of it and at most 64 KiB (a trailing newline
// dropped, as editors add one).
func ReadSecret(dir, user, file string) (string, error) {
	if user == "" || file == "" || strings.ContainsAny(user+file, "/\x00") || file == ".." || file == "." || user == ".." || user == "." {
		return "", fmt.Errorf("no secret %q for user %q", file, user)
	}
	p := filepath.Join(dir, user, file)
	// O_NOFOLLOW: a link planted in a user's directory must not read a
	// file elsewhere (the server reads as its own user).
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", fmt.Errorf("secret %s of user %s: %w (put it at %s)", file, user, unwrapPath(err), p)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("secret %s of user %s: not a regular file", file, user)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretBytes+1))
	if err != nil {
		return "", fmt.Errorf("secret %s of user %s: %w", file, user, err)
	}
	if len(b) > maxSecretBytes {
		return "", fmt.Errorf("secret %s of user %s: over %d bytes", file, user, maxSecretBytes)
	}
	return strings.TrimSuffix(string(b), "\n"), nil
}

func unwrapPath(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// withSecrets adds a job's secretEnv to env, read now from the secrets
// directory; a secret that cannot be read is left out and logged (its
// rank then sees the variable unset).
func (p *pass) withSecrets(m *api.Job, env map[string]string) map[string]string {
	if len(m.Spec.SecretEnv) == 0 {
		return env
	}
	for k, f := range m.Spec.SecretEnv {
		v, err := ReadSecret(p.c.cfg.SecretsDir, m.Spec.User, f)
		if err != nil {
			p.c.log.Warn("secret left out of a job's environment", "job_id", m.ID, "var", k, "err", err)
			continue
		}
		env[k] = v
	}
	return env
}
