package api

import (
	"fmt"
	"time"
)

// Engine names the inference server a deployment runs.
type Engine string

// Engines with built-in command templates.
const (
	EngineVLLM   Engine = "vllm"
	EngineTriton Engine = "triton"
	EngineTRTLLM Engine = "trtllm"
	// EngineSim is gangway's vLLM-faithful engine simulator.
	EngineSim Engine = "sim"
)

// DeploymentSpec is a long-running inference service: replicas of an
// engine behind the gateway.
type DeploymentSpec struct {
	// Name identifies the deployment; unique.
	Name     string `json:"name"`
	Queue    string `json:"queue,omitempty"`
	Priority int    `json:"priority,omitempty"`
	// Engine picks the command template; Command overrides it.
	Engine Engine `json:"engine"`
	// Model is what the engine serves (a path or a hub name for vLLM, a
	// model repository for Triton, a catalog name for the simulator).
	Model string `json:"model"`
	// ServedModelName is the name clients ask for. Default Model.
	ServedModelName string `json:"servedModelName,omitempty"`
	// GPUsPerReplica is the tensor-parallel size; a replica never spans
	// nodes. Default 1.
	GPUsPerReplica int `json:"gpusPerReplica,omitempty"`
	// Quantization: bf16 (default), fp8, int8, int4.
	Quantization string `json:"quantization,omitempty"`
	// Replicas is the desired count when autoscaling is off.
	Replicas int `json:"replicas,omitempty"`
	// MinReplicas and MaxReplicas bound the autoscaler.
	MinReplicas int `json:"minReplicas,omitempty"`
	MaxReplicas int `json:"maxReplicas,omitempty"`
	// Autoscale turns on scaling from engine saturation.
	Autoscale bool `json:"autoscale,omitempty"`
	// ScaleToZeroAfter: an autoscaled deployment with minReplicas 0 goes
	// to zero replicas after this long without a request (its next
	// request is held by the gateway while a replica starts). Default 5m.
	ScaleToZeroAfter Duration `json:"scaleToZeroAfter,omitempty"`
	// Command overrides the engine template. ${MASTER_PORT} is the port the
	// replica must listen on, ${GANGWAY_NODE_ADDR} its address.
	Command []string `json:"command,omitempty"`
	// ExtraArgs are appended to the template's command.
	ExtraArgs []string `json:"extraArgs,omitempty"`
	// ReadinessPath is polled until it answers 200; default per engine
	// (/health, Triton's /v2/health/ready).
	ReadinessPath string            `json:"readinessPath,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	NodeSelector  map[string]string `json:"nodeSelector,omitempty"`
}

// Default fills a DeploymentSpec's zero fields.
func (s *DeploymentSpec) Default() {
	if s.Queue == "" {
		s.Queue = DefaultQueue
	}
	if s.GPUsPerReplica == 0 {
		s.GPUsPerReplica = 1
	}
	if s.ServedModelName == "" {
		s.ServedModelName = s.Model
	}
	if s.Quantization == "" {
		s.Quantization = "bf16"
	}
	if s.Replicas == 0 && !s.Autoscale {
		s.Replicas = 1
	}
	if s.MinReplicas == 0 && !s.Autoscale {
		s.MinReplicas = s.Replicas
	}
	if s.MaxReplicas == 0 {
		s.MaxReplicas = max(s.Replicas, s.MinReplicas, 1)
	}
	if s.ReadinessPath == "" {
		s.ReadinessPath = "/health"
		if s.Engine == EngineTriton {
			s.ReadinessPath = "/v2/health/ready"
		}
	}
}

// Validate checks a defaulted deployment spec.
func (s *DeploymentSpec) Validate() error {
	var fe FieldErrors
	if !validIdent(s.Name) {
		fe.Add("spec.name", "%q: use letters, digits, '-', '_' and '.' (at most 63)", s.Name)
	}
	switch s.Engine {
	case EngineVLLM, EngineTriton, EngineTRTLLM, EngineSim:
	case "":
		if len(s.Command) == 0 {
			fe.Add("spec.engine", "missing: give vllm, triton, trtllm or sim, or a command")
		}
	default:
		fe.Add("spec.engine", "%q: want vllm, triton, trtllm or sim", s.Engine)
	}
	if s.Model == "" {
		fe.Add("spec.model", "missing")
	}
	checkName(&fe, "spec.model", s.Model)
	checkName(&fe, "spec.servedModelName", s.ServedModelName)
	checkArgs(&fe, "spec.command", s.Command)
	checkArgs(&fe, "spec.extraArgs", s.ExtraArgs)
	checkEnv(&fe, "spec.env", s.Env)
	checkLabels(&fe, "spec.nodeSelector", s.NodeSelector)
	if s.GPUsPerReplica < 1 || s.GPUsPerReplica > MaxGPUsPerRank {
		fe.Add("spec.gpusPerReplica", "must be 1..%d (got %d)", MaxGPUsPerRank, s.GPUsPerReplica)
	}
	switch s.Quantization {
	case "bf16", "fp16", "fp8", "int8", "int4":
	default:
		fe.Add("spec.quantization", "%q: want bf16, fp16, fp8, int8 or int4", s.Quantization)
	}
	if s.Replicas < 0 || s.MinReplicas < 0 || s.MaxReplicas < 0 {
		fe.Add("spec.replicas", "replica counts must not be negative")
	}
	if s.MaxReplicas < s.MinReplicas {
		fe.Add("spec.maxReplicas", "%d is below minReplicas %d", s.MaxReplicas, s.MinReplicas)
	}
	if !s.Autoscale && (s.Replicas < s.MinReplicas || s.Replicas > s.MaxReplicas) {
		fe.Add("spec.replicas", "%d is outside [minReplicas %d, maxReplicas %d]", s.Replicas, s.MinReplicas, s.MaxReplicas)
	}
	if s.ScaleToZeroAfter < 0 {
		fe.Add("spec.scaleToZeroAfter", "%v must not be negative", s.ScaleToZeroAfter.D())
	}
	if s.ReadinessPath != "" && s.ReadinessPath[0] != '/' {
		fe.Add("spec.readinessPath", "%q must start with /", s.ReadinessPath)
	}
	checkName(&fe, "spec.readinessPath", s.ReadinessPath)
	return fe.Err()
}

// DecodeDeploymentSpec parses, defaults and validates a deployment spec
// strictly, like DecodeJobSpec.
func DecodeDeploymentSpec(data []byte) (DeploymentSpec, error) {
	var s DeploymentSpec
	if err := decodeStrict(data, &s); err != nil {
		return DeploymentSpec{}, err
	}
	s.Default()
	if err := s.Validate(); err != nil {
		return DeploymentSpec{}, err
	}
	return s, nil
}

// Deployment is a spec and its replicas.
type Deployment struct {
	Spec DeploymentSpec `json:"spec"`
	// Generation counts spec changes; replicas of an older generation are
	// replaced one at a time.
	Generation int64            `json:"generation"`
	Status     DeploymentStatus `json:"status"`
	CreatedAt  time.Time        `json:"createdAt"`
	// User is who applied the deployment first: its owner. RunAs is the
	// account its replicas run under. Both set by the server.
	User  string `json:"user,omitempty"`
	RunAs *RunAs `json:"runAs,omitempty"`
	// ModRevision: see Job.ModRevision.
	ModRevision int64 `json:"modRevision,omitempty"`
}

// DeploymentStatus is written by the deployment controller.
type DeploymentStatus struct {
	// Desired is the replica count the controller aims for now.
	Desired  int       `json:"desired"`
	Replicas []Replica `json:"replicas,omitempty"`
	Ready    int       `json:"ready"`
	Reason   string    `json:"reason,omitempty"`
	// Deleting: the replicas are being stopped before the record goes.
	Deleting     bool      `json:"deleting,omitempty"`
	LastScaledAt time.Time `json:"lastScaledAt,omitzero"`
}

// Replica is one replica job of a deployment.
type Replica struct {
	JobID      string `json:"jobId"`
	Generation int64  `json:"generation"`
	// Endpoint is the replica's base URL once placed.
	Endpoint string `json:"endpoint,omitempty"`
	Ready    bool   `json:"ready"`
	// Retiring replicas are being scaled down or replaced.
	Retiring bool `json:"retiring,omitempty"`
}

// Clone returns a deep copy of d.
func (d *Deployment) Clone() *Deployment {
	c := *d
	c.Spec.Command = append([]string(nil), d.Spec.Command...)
	c.Spec.ExtraArgs = append([]string(nil), d.Spec.ExtraArgs...)
	c.Spec.Env = cloneMap(d.Spec.Env)
	c.Spec.NodeSelector = cloneMap(d.Spec.NodeSelector)
	c.Status.Replicas = append([]Replica(nil), d.Status.Replicas...)
	return &c
}

// OwnerLabel marks a job as a deployment's replica in JobSpec.Owner.
func OwnerLabel(deployment string) string { return "deployment/" + deployment }

// ErrorForField is a one-field validation error, for callers outside the
// package.
func ErrorForField(field, format string, a ...any) error {
	return &ValidationError{Fields: []*FieldError{{Field: field, Msg: fmt.Sprintf(format, a...)}}}
}

// GatewayStats is GET /v1/gateway/stats's body: each model's answers
// through this server's gateway since it started, as counters (a reader
// takes two and divides their differences for rates and means). Every
// replica of the server runs a gateway of its own, and each counts what
// it served.
type GatewayStats struct {
	At     time.Time    `json:"at"`
	Models []ModelStats `json:"models"`
}

// ModelStats are one served model's counters: answers (of any status),
// those of 5xx, and the sums of streamed answers' time to first token
// and time per output token, with their counts.
type ModelStats struct {
	Model       string  `json:"model"`
	Requests    int64   `json:"requests"`
	Errors      int64   `json:"errors"`
	TTFTCount   int64   `json:"ttftCount"`
	TTFTSeconds float64 `json:"ttftSeconds"`
	TPOTCount   int64   `json:"tpotCount"`
	TPOTSeconds float64 `json:"tpotSeconds"`
}
