package api

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUnsafeValuesRefused: each unsafe value of a job spec is refused with
// the field that holds it, in the user's words.
func TestUnsafeValuesRefused(t *testing.T) {
	big := strings.Repeat("a", MaxArgBytes+1)
	tests := []struct {
		name  string
		edit  func(*JobSpec)
		field string
		msg   string // a substring of the message
	}{
		{"NUL in a name", func(s *JobSpec) { s.Name = "a\x00b" }, "spec.name", "U+0000"},
		{"a terminal escape in a name", func(s *JobSpec) { s.Name = "x\x1b[2K\rfake-row" }, "spec.name", "U+001B"},
		{"a newline in a name", func(s *JobSpec) { s.Name = "a\nb" }, "spec.name", "U+000A"},
		{"a C1 control in a name", func(s *JobSpec) { s.Name = "a\u009bb" }, "spec.name", "U+009B"},
		{"a bidi override in a name", func(s *JobSpec) { s.Name = "a\u202eb" }, "spec.name", "U+202E"},
		{"bytes that are not UTF-8 in a name", func(s *JobSpec) { s.Name = "a\x9bb" }, "spec.name", "not UTF-8"},
		{"an escape in a model name", func(s *JobSpec) { s.Model = &ModelRef{Name: "m\x1b"} }, "spec.model.name", "U+001B"},
		{"an escape in a MIG profile", func(s *JobSpec) { s.MIGProfile = "1g\x1b" }, "spec.migProfile", "U+001B"},
		{"an escape in an owner", func(s *JobSpec) { s.Owner = "deployment/\x1b" }, "spec.owner", "U+001B"},
		{"a control in a node selector value", func(s *JobSpec) { s.NodeSelector = map[string]string{"leaf": "l\x001"} }, "spec.nodeSelector.leaf", "U+0000"},
		{"NUL in an argument", func(s *JobSpec) { s.Command = []string{"sh", "-c", "a\x00b"} }, "spec.command[2]", "U+0000 at byte 1"},
		{"an escape in an argument", func(s *JobSpec) { s.Command = []string{"echo", "\x1b]0;x\x07"} }, "spec.command[1]", "U+001B"},
		{"a carriage return in an argument", func(s *JobSpec) { s.Command = []string{"echo", "a\rb"} }, "spec.command[1]", "U+000D"},
		{"an argument of 128 KiB", func(s *JobSpec) { s.Command = []string{"echo", big} }, "spec.command[1]", "at most 131071"},
		{"a command of 4 MB", func(s *JobSpec) {
			s.Command = []string{"echo"}
			for range 32 {
				s.Command = append(s.Command, big[:MaxArgBytes])
			}
		}, "spec.command", "at most 1048576"},
		{"NUL in an env value", func(s *JobSpec) { s.Env = map[string]string{"A": "x\x00"} }, "spec.env.A", "U+0000"},
		{"an escape in an env name", func(s *JobSpec) { s.Env = map[string]string{"A\x1b": "x"} }, "spec.env", "invalid variable name"},
		{"an env of 300 KiB", func(s *JobSpec) {
			s.Env = map[string]string{"A": big[:100000], "B": big[:100000], "C": big[:100000]}
		}, "spec.env", "at most 262144"},
		{"CUDA_VISIBLE_DEVICES", func(s *JobSpec) { s.Env = map[string]string{"CUDA_VISIBLE_DEVICES": "0,1,2,3"} }, "spec.env", "CUDA_VISIBLE_DEVICES: gangway sets it"},
		{"RANK", func(s *JobSpec) { s.Env = map[string]string{"RANK": "0"} }, "spec.env", "RANK: gangway sets it"},
		{"MASTER_ADDR", func(s *JobSpec) { s.Env = map[string]string{"MASTER_ADDR": "evil"} }, "spec.env", "MASTER_ADDR: gangway sets it"},
		{"a PET_ alias", func(s *JobSpec) { s.Env = map[string]string{"PET_NNODES": "9"} }, "spec.env", "PET_NNODES: gangway sets it"},
		{"a GANGWAY_ variable", func(s *JobSpec) { s.Env = map[string]string{"GANGWAY_CHECKPOINT_DIR": "/etc"} }, "spec.env", "GANGWAY_CHECKPOINT_DIR: gangway sets it"},
		{"LD_PRELOAD", func(s *JobSpec) { s.Env = map[string]string{"LD_PRELOAD": "/tmp/x.so"} }, "spec.env", "LD_PRELOAD: loading code"},
		{"a relative working directory", func(s *JobSpec) { s.WorkingDir = "project" }, "spec.workingDir", "absolute"},
		{"a relative checkpoint dir", func(s *JobSpec) { s.CheckpointDir = "ckpt" }, "spec.checkpointDir", "absolute"},
		{"a checkpoint dir climbing out", func(s *JobSpec) { s.CheckpointDir = "/shared/ckpt/../../etc" }, "spec.checkpointDir", "write /etc"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.edit(&s)
			var ve *ValidationError
			if err := s.Validate(); !errors.As(err, &ve) {
				t.Fatalf("Validate = %v; want the value refused", err)
			}
			if len(ve.Fields) != 1 || ve.Fields[0].Field != tt.field || !strings.Contains(ve.Fields[0].Msg, tt.msg) {
				t.Errorf("Validate = %v; want one error on %s saying %q", ve, tt.field, tt.msg)
			}
		})
	}
}

func validSpec() JobSpec {
	s := JobSpec{Name: "t", Ranks: 2, GPUsPerRank: 1, Command: []string{"python3", "train.py"}}
	s.Default()
	return s
}

// TestSafeValuesAccepted: what real specs hold stays accepted.
func TestSafeValuesAccepted(t *testing.T) {
	for name, edit := range map[string]func(*JobSpec){
		"a multi-line sh -c script":  func(s *JobSpec) { s.Command = []string{"sh", "-c", "set -e\n\tcd /w\n./run --x=1\n"} },
		"an env value with newlines": func(s *JobSpec) { s.Env = map[string]string{"SCRIPT": "a\nb\tc"} },
		"LD_LIBRARY_PATH and NCCL": func(s *JobSpec) {
			s.Env = map[string]string{"LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "mlx5"}
		},
		"a unicode name":             func(s *JobSpec) { s.Name = "entraînement-é" },
		"absolute dirs":              func(s *JobSpec) { s.WorkingDir, s.CheckpointDir = "/home/me/project", "/shared/ckpt/llama/" },
		"an argument of 128 KiB - 1": func(s *JobSpec) { s.Command = []string{"echo", strings.Repeat("a", MaxArgBytes)} },
	} {
		s := validSpec()
		edit(&s)
		if err := s.Validate(); err != nil {
			t.Errorf("%s: Validate = %v; want nil", name, err)
		}
	}
}

// TestDeploymentUnsafeValuesRefused: a deployment's command, arguments,
// env and names are held to the same rules.
func TestDeploymentUnsafeValuesRefused(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(*DeploymentSpec)
		field string
	}{
		{"an escape in the model", func(s *DeploymentSpec) { s.Model, s.ServedModelName = "m\x1b[31m", "m" }, "spec.model"},
		{"an escape in the served name", func(s *DeploymentSpec) { s.ServedModelName = "m\x1b" }, "spec.servedModelName"},
		{"NUL in the command", func(s *DeploymentSpec) { s.Command = []string{"x\x00"} }, "spec.command[0]"},
		{"NUL in extra args", func(s *DeploymentSpec) { s.ExtraArgs = []string{"--a", "\x00"} }, "spec.extraArgs[1]"},
		{"MASTER_PORT", func(s *DeploymentSpec) { s.Env = map[string]string{"MASTER_PORT": "1"} }, "spec.env"},
		{"LD_PRELOAD", func(s *DeploymentSpec) { s.Env = map[string]string{"LD_PRELOAD": "x.so"} }, "spec.env"},
		{"a control in a node selector key", func(s *DeploymentSpec) { s.NodeSelector = map[string]string{"a\x00": "b"} }, "spec.nodeSelector"},
	}
	for _, tt := range tests {
		s := DeploymentSpec{Name: "d", Engine: EngineVLLM, Model: "m"}
		tt.edit(&s)
		s.Default()
		var ve *ValidationError
		if err := s.Validate(); !errors.As(err, &ve) || len(ve.Fields) != 1 || ve.Fields[0].Field != tt.field {
			t.Errorf("%s: Validate = %v; want one error on %s", tt.name, err, tt.field)
		}
	}
}

// TestLaunchContractNames: the names gangway sets, and some it does not.
func TestLaunchContractNames(t *testing.T) {
	var got []string
	for _, n := range []string{"RANK", "GANGWAY_JOB_ID", "PET_NNODES", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG", "RANKS", "LD_LIBRARY_PATH", "PATH"} {
		if InLaunchContract(n) {
			got = append(got, n)
		}
	}
	if diff := cmp.Diff([]string{"RANK", "GANGWAY_JOB_ID", "PET_NNODES", "CUDA_VISIBLE_DEVICES"}, got); diff != "" {
		t.Errorf("InLaunchContract (-want +got):\n%s", diff)
	}
}

// TestDocumentedSpecsValidate: every spec in the README and the examples'
// READMEs still decodes and validates.
func TestDocumentedSpecsValidate(t *testing.T) {
	docs, _ := filepath.Glob("../../examples/*/README.md")
	docs = append(docs, "../../README.md")
	block := regexp.MustCompile("(?s)```ya?ml\n(.*?)```")
	n := 0
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range block.FindAllSubmatch(b, -1) {
			if regexp.MustCompile(`(?m)^keys:`).Match(m[1]) {
				continue // a gateway key file (internal/inference/gateway tests it)
			}
			if regexp.MustCompile(`(?m)^scrape_configs:`).Match(m[1]) {
				continue // Prometheus's (promtool checks it in internal/cli)
			}
			n++
			var err error
			if regexp.MustCompile(`(?m)^engine:`).Match(m[1]) {
				_, err = DecodeDeploymentSpec(m[1])
			} else {
				_, err = DecodeJobSpec(m[1])
			}
			if err != nil {
				t.Errorf("%s: spec %d: %v\n%s", doc, n, err, m[1])
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d specs; the README has a job and a deployment", n)
	}
}
