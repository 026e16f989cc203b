package slurm

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gangway/gangway/internal/api"
)

func TestHostLists(t *testing.T) {
	for _, tc := range []struct {
		names []string
		list  string
	}{
		{[]string{"host1", "host2", "host3"}, "host[1-3]"},
		{[]string{"gpu01", "gpu02", "gpu07", "login"}, "gpu[01-02,07],login"},
		{[]string{"a"}, "a"},
		{[]string{"n9", "n10"}, "n9,n10"}, // widths differ: Slurm keeps them apart
		{[]string{"r1n1", "r1n2", "r2n1"}, "r1n[1-2],r2n1"},
		{[]string{"gpu001-ib", "gpu002-ib"}, "gpu[001-002]-ib"},
	} {
		if got := CompressHosts(tc.names); got != tc.list {
			t.Errorf("CompressHosts(%v) = %q, want %q", tc.names, got, tc.list)
		}
		back, err := ExpandHosts(tc.list)
		want := slices.Clone(tc.names)
		slices.Sort(want)
		slices.Sort(back)
		if err != nil || !slices.Equal(back, want) {
			t.Errorf("ExpandHosts(%q) = %v, %v; want %v", tc.list, back, err, tc.names)
		}
	}
	for _, bad := range []string{"n[1-", "n[3-1]", "n[a-b]", "n]1[", "n[1-2][3]", "n[0-99999999]"} {
		if got, err := ExpandHosts(bad); err == nil {
			t.Errorf("ExpandHosts(%q) = %v, want an error", bad, got)
		}
	}
}

func FuzzHostLists(f *testing.F) {
	f.Add("gpu01,gpu02,login")
	f.Add("n9,n10,x")
	f.Fuzz(func(t *testing.T, s string) {
		names := strings.Split(s, ",")
		for _, n := range names {
			if n == "" || strings.ContainsAny(n, "[]") {
				return
			}
		}
		back, err := ExpandHosts(CompressHosts(names))
		if err != nil {
			t.Fatalf("%v → %q: %v", names, CompressHosts(names), err)
		}
		a, b := slices.Clone(names), slices.Clone(back)
		slices.Sort(a)
		slices.Sort(b)
		if !slices.Equal(slices.Compact(a), slices.Compact(b)) {
			t.Fatalf("%v → %q → %v", names, CompressHosts(names), back)
		}
	})
}

// The Slurm documentation's multi-node GPU example, as a user brings it.
const multiNode = `#!/bin/bash
#SBATCH --job-name=multinode-example
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4          # one task per GPU
#SBATCH --gres=gpu:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=256G
#SBATCH --time=1-00:00:00
#SBATCH --partition=gpu
#SBATCH --output=%x-%j.out
#SBATCH --signal=B:USR1@120
#SBATCH --account=proj42

export MASTER_PORT=29500
srun python train.py --epochs 10
#SBATCH --nodes=99
`

func TestParseScript(t *testing.T) {
	var o Options
	s, err := ParseScript(&o, []byte(multiNode))
	if err != nil {
		t.Fatal(err)
	}
	if s.Interpreter != "/bin/bash" || o.Nodes != 2 || o.TasksPerNode != 4 || o.GPUsPerNode != 4 || o.CPUsPerTask != 8 || o.Mem != 256<<30 || o.Time != "1-00:00:00" || o.Partition != "gpu" {
		t.Fatalf("read %+v", o)
	}
	spec, notes, err := Spec(&o, s, "multinode.sbatch", []string{"x"})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Name != "multinode-example" || spec.Queue != "gpu" || spec.Ranks != 8 || spec.RanksPerNode != 4 || spec.GPUsPerRank != 1 ||
		spec.TimeLimit.D() != 24*time.Hour || spec.Resources.CPUMillis != 8000 || spec.Resources.MemoryBytes != 64<<30 ||
		spec.CheckpointSignal != "SIGUSR1" || !spec.Slurm {
		t.Errorf("spec %+v, resources %+v", spec, spec.Resources)
	}
	if spec.Command[len(spec.Command)-2] != multiNode || spec.Command[len(spec.Command)-1] != "x" {
		t.Errorf("command %q: want the script, then its arguments", spec.Command)
	}
	joined := strings.Join(notes, "\n")
	for _, want := range []string{"--account", "--output=%x-%j.out", "120s before"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q: none says %q", notes, want)
		}
	}
	spec.Default()
	if err := spec.Validate(); err != nil {
		t.Errorf("the spec is not admitted: %v", err)
	}
}

func TestParseArgsAndSpecErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"--frobnicate=1"}, "--frobnicate: gangway does not know it"},
		{[]string{"-N"}, "--nodes needs a value"},
		{[]string{"--nodes=two"}, `--nodes: "two": want a whole number`},
		{[]string{"--parsable=yes"}, "--parsable takes no value"},
		{[]string{"--mem=lots"}, "--mem"},
		{[]string{"-X"}, "-X: gangway does not know it"},
	} {
		var o Options
		if _, err := ParseArgs(&o, tc.args); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("ParseArgs(%q): %v; want %q", tc.args, err, tc.err)
		}
	}
	var o Options
	rest, err := ParseArgs(&o, []string{"-N2", "-n", "8", "--gpus-per-task=1", "-t", "30", "-J", "x", "--wrap", "hostname", "script.sh", "-N", "3"})
	if err != nil || o.Nodes != 2 || o.Tasks != 8 || o.Time != "30" || o.Name != "x" || !slices.Equal(rest, []string{"script.sh", "-N", "3"}) {
		t.Fatalf("%+v rest %q, %v", o, rest, err)
	}
	spec, _, err := Spec(&o, nil, "", nil)
	if err != nil || spec.Ranks != 8 || spec.RanksPerNode != 4 || spec.TimeLimit.D() != 30*time.Minute || spec.Command[2] != "hostname" {
		t.Errorf("--wrap spec %+v, %v", spec, err)
	}
	for _, tc := range []struct {
		o   Options
		err string
	}{
		{Options{Wrap: "x", Nodes: 3, Tasks: 4}, "does not divide"},
		{Options{Wrap: "x", Nodes: 2, TasksPerNode: 4, GPUsPerNode: 6}, "do not divide"},
		{Options{Wrap: "x", Dependency: "afterok:12?afterok:13"}, "--dependency"},
		{Options{Wrap: "x", Dependency: "aftersome:12"}, "--dependency"},
		{Options{Wrap: "x", Time: "soon"}, "--time"},
		{Options{Wrap: "x", Constraint: "a100|h100"}, "--constraint"},
		{Options{}, "nothing to run"},
	} {
		if _, _, err := Spec(&tc.o, nil, "", nil); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Spec(%+v): %v; want %q", tc.o, err, tc.err)
		}
	}
}

func TestNotAScript(t *testing.T) {
	var o Options
	if _, err := ParseScript(&o, []byte("ranks: 2\ncommand: [x]\n")); err == nil || !strings.Contains(err.Error(), "#!") {
		t.Errorf("a YAML file read as a script: %v", err)
	}
	if _, err := ParseScript(&o, []byte("#!/bin/sh\n#SBATCH --nodes=2 'unclosed\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("unclosed quote: %v", err)
	}
}

func FuzzParseScript(f *testing.F) {
	f.Add([]byte(multiNode))
	f.Add([]byte("#!/bin/sh\n#SBATCH -N 2 -n 4 --gres=gpu:a100:2\nsrun hostname\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var o Options
		s, err := ParseScript(&o, b)
		if err != nil {
			return
		}
		spec, _, err := Spec(&o, s, "job.sh", nil)
		if err != nil {
			return
		}
		if spec.Ranks < 1 || spec.GPUsPerRank < 1 {
			t.Fatalf("%q → ranks %d, GPUs %d", b, spec.Ranks, spec.GPUsPerRank)
		}
		_ = api.JobSpec{}
	})
}

func TestScontrolJobs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		verb string
		ids  []string
	}{
		{[]string{"requeue", "7"}, "requeue", []string{"7"}},
		{[]string{"requeue", "7,8", "9"}, "requeue", []string{"7", "8", "9"}},
		{[]string{"hold", "3"}, "hold", []string{"3"}},
		{[]string{"release", "3,"}, "release", []string{"3"}},
		{[]string{"requeue"}, "", nil},
		{[]string{"requeue", ","}, "", nil},
		{[]string{"show", "hostnames"}, "", nil},
		{[]string{"update", "JobId=3"}, "", nil},
		{nil, "", nil},
	} {
		verb, ids, ok := ScontrolJobs(tc.args)
		if verb != tc.verb && ok || !slices.Equal(ids, tc.ids) && ok || ok != (tc.verb != "") {
			t.Errorf("ScontrolJobs(%q) = %q %q %v; want %q %q", tc.args, verb, ids, ok, tc.verb, tc.ids)
		}
	}
}
