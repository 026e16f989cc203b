package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/controlplane/store"
)

func (s *Server) deploymentRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/deployments", s.applyDeployment)
	mux.HandleFunc("GET /v1/deployments", s.listDeployments)
	mux.HandleFunc("GET /v1/deployments/{name}", s.getDeployment)
	mux.HandleFunc("POST /v1/deployments/{name}/scale", s.scaleDeployment)
	mux.HandleFunc("DELETE /v1/deployments/{name}", s.deleteDeployment)
}

// applyDeployment creates a deployment, or updates its spec (a new
// generation, rolled out replica by replica) if it exists.
func (s *Server) applyDeployment(w http.ResponseWriter, r *http.Request) {
	spec, ok := decodeBody(w, r, api.DecodeDeploymentSpec)
	if !ok {
		return
	}
	ctx := r.Context()
	nodes, _, err := s.st.Nodes(ctx)
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	js := api.JobSpec{Ranks: 1, GPUsPerRank: spec.GPUsPerReplica, NodeSelector: spec.NodeSelector}
	if err := checkCapacity(&js, nodes); err != nil {
		writeError(w, http.StatusUnprocessableEntity, api.ErrorForField("spec.gpusPerReplica",
			"%d GPUs per replica: a tensor-parallel replica must fit in one node (%v)", spec.GPUsPerReplica, err))
		return
	}
	wh := who(r)
	// A deployment's replicas are jobs of its owner: the same checks as a
	// submission (queue, account).
	js.Queue = spec.Queue
	if err := s.admitUser(ctx, wh, &js); err != nil {
		writeError(w, admitStatus(err), err)
		return
	}
	d := &api.Deployment{Spec: spec, Generation: 1, CreatedAt: time.Now().UTC(), User: js.User, RunAs: js.RunAs}
	err = s.st.CreateDeployment(ctx, d)
	code := http.StatusCreated
	if errors.Is(err, store.ErrExists) {
		code = http.StatusOK
		d, err = s.st.ModifyDeployment(ctx, spec.Name, func(old *api.Deployment) error {
			// Only its owner (or an admin) replaces a deployment: another
			// user's command would receive every user's prompts.
			if err := mayAct(wh, "deployment "+spec.Name, old.User); err != nil {
				return err
			}
			if old.Status.Deleting {
				return fmt.Errorf("deployment %s is being deleted: %w", spec.Name, errConflict)
			}
			if !sameSpec(&old.Spec, &spec) {
				old.Generation++
			}
			old.Spec = spec
			return nil
		})
	}
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	s.log.Info("deployment applied", "deployment", spec.Name, "generation", d.Generation)
	writeJSON(w, r, code, d)
}

// sameSpec reports whether two specs run the same replicas (replica
// counts aside), so that scaling alone does not roll the replicas.
func sameSpec(a, b *api.DeploymentSpec) bool {
	x, y := *a, *b
	x.Replicas, y.Replicas = 0, 0
	x.MinReplicas, y.MinReplicas = 0, 0
	x.MaxReplicas, y.MaxReplicas = 0, 0
	x.Autoscale, y.Autoscale = false, false
	xb, _ := jsonBytes(x)
	yb, _ := jsonBytes(y)
	return string(xb) == string(yb)
}

func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request) {
	if err := s.blockingIndex(r, store.DeploymentsPrefix); err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	ds, rev, err := s.st.Deployments(r.Context())
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	w.Header().Set("X-Gangway-Index", strconv.FormatInt(rev, 10))
	for i, d := range ds {
		ds[i] = redactDeployment(who(r), d)
	}
	writeJSON(w, r, http.StatusOK, api.DeploymentList{Index: rev, Deployments: ds})
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request) {
	d, err := s.st.Deployment(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, redactDeployment(who(r), d))
}

// redactDeployment hides a deployment's environment from all but its
// owner and admins.
func redactDeployment(wh *api.Who, d *api.Deployment) *api.Deployment {
	if len(d.Spec.Env) == 0 || seesSecrets(wh, d.User) {
		return d
	}
	c := *d
	c.Spec.Env = redactEnv(d.Spec.Env)
	return &c
}

func (s *Server) scaleDeployment(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(r.URL.Query().Get("replicas"))
	if err != nil || n < 0 {
		writeError(w, http.StatusBadRequest, api.ErrorForField("replicas", "must be a non-negative integer"))
		return
	}
	wh := who(r)
	d, err := s.st.ModifyDeployment(r.Context(), r.PathValue("name"), func(d *api.Deployment) error {
		if err := mayAct(wh, "deployment "+d.Spec.Name, d.User); err != nil {
			return err
		}
		if d.Spec.Autoscale {
			return api.ErrorForField("replicas", "deployment %s autoscales; change minReplicas/maxReplicas instead", d.Spec.Name)
		}
		d.Spec.Replicas = n
		d.Spec.MinReplicas = min(d.Spec.MinReplicas, n)
		d.Spec.MaxReplicas = max(d.Spec.MaxReplicas, n)
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusOK, d)
}

func (s *Server) deleteDeployment(w http.ResponseWriter, r *http.Request) {
	wh := who(r)
	d, err := s.st.ModifyDeployment(r.Context(), r.PathValue("name"), func(d *api.Deployment) error {
		if err := mayAct(wh, "deployment "+d.Spec.Name, d.User); err != nil {
			return err
		}
		d.Status.Deleting = true
		return nil
	})
	if err != nil {
		writeError(w, statusFor(err), err)
		return
	}
	writeJSON(w, r, http.StatusAccepted, d)
}
