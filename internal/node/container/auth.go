package container

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/registry"
)

// hubKeys are the names Docker's config gives Docker Hub.
var hubKeys = []string{"https://index.docker.io/v1/", "index.docker.io", "docker.io", "registry-1.docker.io"}

// RegistryAuth is the credential for pulling image, from file, a Docker
// client config (config.json, as `docker login` writes it: "auths", each
// with "auth" (base64 user:password) or "username" and "password"),
// encoded as the engine's pull takes it. "" with no error: the file has
// none for the image's registry, and the pull is anonymous. Credential
// helpers (credsStore) are not run: the node's agent is not a user's
// shell.
func RegistryAuth(file, image string) (string, error) {
	if file == "" {
		return "", nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("registry credentials (--registry-auth): %w", err)
	}
	var cfg struct {
		Auths map[string]struct {
			Auth     string `json:"auth"`
			Username string `json:"username"`
			Password string `json:"password"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("registry credentials %s: %w", file, err)
	}
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	domain := reference.Domain(named)
	keys := []string{domain, "https://" + domain, "https://" + domain + "/v1/", "https://" + domain + "/v2/"}
	if domain == "docker.io" {
		keys = hubKeys
	}
	for _, k := range keys {
		a, ok := cfg.Auths[k]
		if !ok {
			continue
		}
		user, pass := a.Username, a.Password
		if a.Auth != "" {
			raw, err := base64.StdEncoding.DecodeString(a.Auth)
			u, p, found := strings.Cut(string(raw), ":")
			if err != nil || !found {
				return "", fmt.Errorf("registry credentials %s: auths[%q].auth: want base64 of user:password", file, k)
			}
			user, pass = u, p
		}
		return registry.EncodeAuthConfig(registry.AuthConfig{Username: user, Password: pass, ServerAddress: k})
	}
	return "", nil
}
