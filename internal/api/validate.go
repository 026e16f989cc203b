package api

import (
	"errors"
	"fmt"
	"strings"

	"github.com/distribution/reference"
)

// FieldError says which field of an input is wrong and why. Field is a dotted
// path such as "spec.ranks"; Line and Column locate it in the source text when
// known.
type FieldError struct {
	Field  string `json:"field,omitempty"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
	Msg    string `json:"message"`
}

func (e *FieldError) Error() string {
	var b strings.Builder
	if e.Line > 0 {
		fmt.Fprintf(&b, "line %d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ", column %d", e.Column)
		}
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// ErrInvalid is wrapped by every validation failure.
var ErrInvalid = errors.New("api: invalid input")

// ValidationError lists every wrong field of one input.
type ValidationError struct {
	Fields []*FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Error()
	}
	return strings.Join(parts, "; ")
}

// Unwrap lets errors.Is(err, ErrInvalid) work.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// FieldErrors collects what is wrong with a request, field by field, for
// checks that report every field at once; ErrorForField is the one-field
// form.
type FieldErrors []*FieldError

// Add records that field is wrong, as format says.
func (fe *FieldErrors) Add(field, format string, args ...any) {
	*fe = append(*fe, &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)})
}

// Err is a *ValidationError with the fields, or nil if there are none.
func (fe FieldErrors) Err() error {
	if len(fe) == 0 {
		return nil
	}
	return &ValidationError{Fields: fe}
}

// Limits for specs, generous but finite so a typo cannot ask for a billion
// ranks.
const (
	MaxRanks       = 1 << 20
	MaxGPUsPerRank = 72
	maxNameLen     = 128
)

// Validate checks a defaulted spec. It returns a *ValidationError naming
// every wrong field, or nil.
func (s *JobSpec) Validate() error {
	var fe FieldErrors
	if len(s.Name) > maxNameLen {
		fe.Add("spec.name", "longer than %d characters", maxNameLen)
	}
	checkName(&fe, "spec.name", s.Name)
	if s.Queue != "" && !validIdent(s.Queue) {
		fe.Add("spec.queue", "%q: use letters, digits, '-', '_' and '.' only", s.Queue)
	}
	switch s.Output {
	case "", OutputKeep, OutputDiscard:
	default:
		fe.Add("spec.output", "%q: want keep (a log file per stream) or discard (to /dev/null)", s.Output)
	}
	if s.Array != "" {
		if _, err := ParseArray(s.Array); err != nil {
			fe.Add("spec.array", "%s", err)
		}
		if s.Owner != "" {
			fe.Add("spec.array", "a deployment's replicas are not an array")
		}
	}
	switch {
	case s.Ranks < 1:
		fe.Add("spec.ranks", "must be at least 1 (got %d)", s.Ranks)
	case s.Ranks > MaxRanks:
		fe.Add("spec.ranks", "at most %d (got %d)", MaxRanks, s.Ranks)
	}
	switch {
	case s.GPUsPerRank < 1:
		fe.Add("spec.gpusPerRank", "must be at least 1 (got %d)", max(s.GPUsPerRank, 0))
	case s.GPUsPerRank > MaxGPUsPerRank:
		fe.Add("spec.gpusPerRank", "at most %d (got %d)", MaxGPUsPerRank, s.GPUsPerRank)
	}
	if s.RanksPerNode < 0 {
		fe.Add("spec.ranksPerNode", "must not be negative (got %d)", s.RanksPerNode)
	} else if s.RanksPerNode > 0 && s.Ranks > 0 && s.Ranks%s.RanksPerNode != 0 {
		fe.Add("spec.ranksPerNode", "%d does not divide ranks (%d)", s.RanksPerNode, s.Ranks)
	}
	if len(s.Command) == 0 || s.Command[0] == "" {
		fe.Add("spec.command", "missing: give the program to run, e.g. [\"python3\", \"train.py\"]")
	}
	checkArgs(&fe, "spec.command", s.Command)
	checkEnv(&fe, "spec.env", s.Env)
	checkSecretEnv(&fe, s)
	if s.WorkingDir != "" {
		checkAbsDir(&fe, "spec.workingDir", s.WorkingDir)
	}
	checkLabels(&fe, "spec.nodeSelector", s.NodeSelector)
	checkJobLabels(&fe, "spec.labels", s.Labels)
	if s.MaxRestarts != nil && *s.MaxRestarts < 0 {
		fe.Add("spec.maxRestarts", "must not be negative (got %d)", *s.MaxRestarts)
	}
	if s.RestartBackoff < 0 {
		fe.Add("spec.restartBackoff", "must not be negative")
	}
	if s.HangTimeout < 0 {
		fe.Add("spec.hangTimeout", "must not be negative")
	}
	if s.StragglerCheck != "" && s.StragglerCheck != "on" && s.StragglerCheck != "off" {
		fe.Add("spec.stragglerCheck", "%q: want on or off", s.StragglerCheck)
	}
	if s.TerminationGracePeriod < 0 {
		fe.Add("spec.terminationGracePeriod", "must not be negative")
	}
	if s.CheckpointDir != "" {
		checkAbsDir(&fe, "spec.checkpointDir", s.CheckpointDir)
	}
	switch s.Launch {
	case "", LaunchPerRank, LaunchPerNode, LaunchTorchrun, LaunchDeepSpeed:
	default:
		fe.Add("spec.launch", "%q: want per-rank, per-node, torchrun or deepspeed", s.Launch)
	}
	if s.Launch.PerNode() && s.Launch != LaunchPerNode && len(s.Command) > 0 && LauncherIndex(s.Command) < 0 {
		fe.Add("spec.command", "launch %s needs the command to start with %s (or python -m its module)", s.Launch, s.Launch)
	}
	if p := s.Parallelism; p != nil {
		if p.TP < 0 || p.PP < 0 || p.DP < 0 {
			fe.Add("spec.parallelism", "sizes must not be negative")
		}
		if p.Auto && (p.TP > 0 || p.PP > 0 || p.DP > 0) {
			fe.Add("spec.parallelism", "auto and explicit tp/pp/dp together; give one or the other")
		}
		if p.Auto && (s.Model == nil || s.Model.Name == "") {
			fe.Add("spec.model.name", "parallelism: auto needs a model to plan for")
		}
		if !p.Auto && s.Ranks > 0 {
			tp, pp := max(p.TP, 1), max(p.PP, 1)
			switch {
			case s.Ranks%(tp*pp) != 0:
				fe.Add("spec.parallelism", "tp %d × pp %d does not divide ranks (%d)", tp, pp, s.Ranks)
			case p.DP > 0 && tp*pp*p.DP != s.Ranks:
				fe.Add("spec.parallelism", "tp %d × pp %d × dp %d = %d, but ranks is %d", tp, pp, p.DP, tp*pp*p.DP, s.Ranks)
			}
		}
		switch p.Order {
		case "", "tp-pp-dp", "tp-dp-pp", "tp-cp-ep-pp-dp", "tp-cp-ep-dp-pp":
		default:
			fe.Add("spec.parallelism.order", "%q: want tp-pp-dp or tp-dp-pp", p.Order)
		}
	}
	if m := s.Model; m != nil {
		if m.Name == "" {
			fe.Add("spec.model.name", "missing")
		}
		checkName(&fe, "spec.model.name", m.Name)
		if m.Seq < 0 || m.GlobalBatch < 0 {
			fe.Add("spec.model", "seq and globalBatch must not be negative")
		}
	}
	if t := s.Topology; t != nil {
		for field, v := range map[string]string{"spec.topology.required": t.Required, "spec.topology.preferred": t.Preferred} {
			switch v {
			case "", "nvlink-domain", "leaf", "spine":
			default:
				fe.Add(field, "%q: want nvlink-domain, leaf or spine", v)
			}
		}
	}
	if s.TimeLimit < 0 {
		fe.Add("spec.timeLimit", "must not be negative")
	}
	if s.PreemptionGracePeriod < 0 {
		fe.Add("spec.preemptionGracePeriod", "must not be negative")
	}
	switch s.CheckpointSignal {
	case "", "SIGUSR1", "SIGUSR2", "SIGINT", "SIGTERM", "SIGHUP":
	default:
		fe.Add("spec.checkpointSignal", "%q: want SIGUSR1, SIGUSR2, SIGINT, SIGTERM or SIGHUP", s.CheckpointSignal)
	}
	if s.GPUMilli < 0 || s.GPUMilli >= 1000 {
		fe.Add("spec.gpuMilli", "must be 1..999 thousandths of a GPU (got %d); ask for whole GPUs with gpusPerRank", s.GPUMilli)
	}
	if (s.GPUMilli > 0 || s.MIGProfile != "") && s.GPUsPerRank > 1 {
		fe.Add("spec.gpusPerRank", "a fractional rank (gpuMilli or migProfile) takes part of one GPU; drop gpusPerRank")
	}
	if s.GPUMilli > 0 && s.MIGProfile != "" {
		fe.Add("spec.migProfile", "give gpuMilli or migProfile, not both")
	}
	checkName(&fe, "spec.migProfile", s.MIGProfile)
	checkName(&fe, "spec.owner", s.Owner)
	if r := s.Resources; r != nil {
		if r.MemoryBytes < 0 {
			fe.Add("spec.resources.memoryBytes", "must not be negative")
		}
		if r.Memory != 0 && r.MemoryBytes != 0 && int64(r.Memory) != r.MemoryBytes {
			fe.Add("spec.resources.memory", "%d bytes, but memoryBytes says %d: give one of them", r.Memory, r.MemoryBytes)
		}
		if r.CPUMillis < 0 {
			fe.Add("spec.resources.cpuMillis", "must not be negative")
		}
	}
	if _, err := ParseDependency(s.Dependency); err != nil {
		fe.Add("spec.dependency", "%s", err)
	}
	s.Logs.validate(&fe)
	s.validateContainer(&fe)
	return fe.Err()
}

// validateContainer checks spec.image and the fields that go with it.
func (s *JobSpec) validateContainer(fe *FieldErrors) {
	if s.Image != "" {
		if _, err := reference.ParseNormalizedNamed(s.Image); err != nil {
			fe.Add("spec.image", "%q is not an image reference (want NAME[:TAG][@DIGEST], as nvcr.io/nvidia/pytorch:24.05-py3): %v", s.Image, err)
		}
	}
	switch s.ImagePullPolicy {
	case "", PullIfNotPresent, PullAlways, PullNever:
	default:
		fe.Add("spec.imagePullPolicy", "%q: want IfNotPresent, Always or Never", s.ImagePullPolicy)
	}
	switch s.ContainerNetwork {
	case "", NetworkHost, NetworkBridge:
	default:
		fe.Add("spec.containerNetwork", "%q: want host or bridge", s.ContainerNetwork)
	}
	if s.Image == "" {
		if s.ImagePullPolicy != "" {
			fe.Add("spec.imagePullPolicy", "needs spec.image")
		}
		if s.ContainerNetwork != "" {
			fe.Add("spec.containerNetwork", "needs spec.image")
		}
	}
}

// validate checks spec.logs; nil (the node's bounds) is valid.
func (l *LogSpec) validate(fe *FieldErrors) {
	if l == nil {
		return
	}
	if l.MaxFileBytes != 0 && (l.MaxFileBytes < MinLogFileBytes || l.MaxFileBytes > MaxLogFileBytes) {
		fe.Add("spec.logs.maxFileBytes", "must be %d (1 KiB) to %d (1 GiB) (got %d)", MinLogFileBytes, MaxLogFileBytes, l.MaxFileBytes)
	}
	if l.MaxFiles < 0 || l.MaxFiles > MaxLogFiles {
		fe.Add("spec.logs.maxFiles", "must be 1 to %d (got %d)", MaxLogFiles, l.MaxFiles)
	}
}

func validIdent(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, r := range s {
		ok := r == '-' || r == '_' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !ok {
			return false
		}
	}
	return true
}

// ValidNodeName reports whether s can name a node.
func ValidNodeName(s string) bool { return validIdent(s) }

// LauncherIndex returns the index of the launcher program in a per-node
// command: "torchrun" or "deepspeed" itself, or the module of
// "python -m torch.distributed.run" / "-m deepspeed.launcher.runner". -1 if
// there is none.
func LauncherIndex(cmd []string) int {
	for i, a := range cmd {
		base := a[strings.LastIndexByte(a, '/')+1:]
		switch base {
		case "torchrun", "deepspeed":
			return i
		}
		if a == "-m" && i+1 < len(cmd) {
			switch cmd[i+1] {
			case "torch.distributed.run", "torch.distributed.launch", "deepspeed.launcher.runner":
				return i + 1
			}
		}
	}
	return -1
}
