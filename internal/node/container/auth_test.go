package container

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/registry"
)

// The credential a pull sends is the one config.json gives the image's
// registry, as docker login wrote it; none for another registry.
func TestRegistryAuth(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(file, []byte(`{"auths": {
  "nvcr.io": {"auth": "`+base64.StdEncoding.EncodeToString([]byte("$oauthtoken:nvapi-secret"))+`"},
  "https://index.docker.io/v1/": {"username": "me", "password": "hub-pass"},
  "registry.example.com:5000": {"auth": "bm90LWEtcGFpcg=="}
}}`), 0o600)
	for _, tc := range []struct {
		image, user, pass, err string
	}{
		{"nvcr.io/nvidia/pytorch:24.05-py3", "$oauthtoken", "nvapi-secret", ""},
		{"ubuntu:22.04", "me", "hub-pass", ""},
		{"ghcr.io/org/img:1", "", "", ""}, // none: anonymous
		{"registry.example.com:5000/x:1", "", "", "want base64 of user:password"},
	} {
		enc, err := RegistryAuth(file, tc.image)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want %q", tc.image, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.image, err)
		}
		if tc.user == "" {
			if enc != "" {
				t.Errorf("%s: sent a credential for another registry", tc.image)
			}
			continue
		}
		ac, err := registry.DecodeAuthConfig(enc)
		if err != nil || ac.Username != tc.user || ac.Password != tc.pass {
			t.Errorf("%s: sent %+v, %v; want %s/%s", tc.image, ac, err, tc.user, tc.pass)
		}
	}
	if _, err := RegistryAuth(filepath.Join(t.TempDir(), "none.json"), "ubuntu"); err == nil || !strings.Contains(err.Error(), "--registry-auth") {
		t.Errorf("a missing file: %v; want the flag named", err)
	}
	if enc, err := RegistryAuth("", "ubuntu"); enc != "" || err != nil {
		t.Errorf("no file: %q, %v", enc, err)
	}
}
