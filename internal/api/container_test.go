package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestContainerSpec(t *testing.T) {
	const base = "ranks: 1\ncommand: [train]\n"
	for _, tt := range []struct {
		name   string
		in     string
		want   *ContainerSpec // nil: no container
		errHas []string       // nil: valid
	}{
		{name: "no image: a plain process", in: base},
		{name: "image, defaults", in: base + "image: nvcr.io/nvidia/pytorch:24.05-py3\n",
			want: &ContainerSpec{Image: "nvcr.io/nvidia/pytorch:24.05-py3", PullPolicy: PullIfNotPresent, Network: NetworkHost}},
		{name: "short name, never pulled, bridge", in: base + "image: trainer:1\nimagePullPolicy: Never\ncontainerNetwork: bridge\n",
			want: &ContainerSpec{Image: "trainer:1", PullPolicy: PullNever, Network: NetworkBridge}},
		{name: "digest", in: base + "image: busybox@sha256:" + strings.Repeat("ab", 32) + "\nimagePullPolicy: Always\n",
			want: &ContainerSpec{Image: "busybox@sha256:" + strings.Repeat("ab", 32), PullPolicy: PullAlways, Network: NetworkHost}},
		{name: "upper case name", in: base + "image: Trainer:1\n", errHas: []string{"spec.image", `"Trainer:1" is not an image reference`}},
		{name: "spaces", in: base + "image: \"my image\"\n", errHas: []string{"spec.image"}},
		{name: "bad tag", in: base + "image: trainer:-1\n", errHas: []string{"spec.image"}},
		{name: "pull policy", in: base + "image: trainer:1\nimagePullPolicy: ifnotpresent\n", errHas: []string{"spec.imagePullPolicy", "want IfNotPresent, Always or Never"}},
		{name: "network", in: base + "image: trainer:1\ncontainerNetwork: none\n", errHas: []string{"spec.containerNetwork", "want host or bridge"}},
		{name: "pull policy without image", in: base + "imagePullPolicy: Never\n", errHas: []string{"spec.imagePullPolicy", "needs spec.image"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeJobSpec([]byte(tt.in))
			if tt.errHas == nil {
				if err != nil {
					t.Fatalf("DecodeJobSpec: %v", err)
				}
				if diff := cmp.Diff(tt.want, got.ContainerOf()); diff != "" {
					t.Errorf("container (-want +got):\n%s", diff)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v; want one wrapping ErrInvalid", err)
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}
