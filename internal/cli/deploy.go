package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/cmdkit"
)

func runDeploy(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "deploy", "DEPLOYMENT.yaml")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 1 {
		fs.Usage()
		return 2
	}
	b, err := readSpecFile(pos[0])
	if err != nil {
		return fail(e, err)
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	d, err := c.Deploy(ctx, b)
	if err != nil {
		return fail(e, err)
	}
	if *out != "table" {
		return exitOn(e, printAs(e, *out, d))
	}
	fmt.Fprintf(e.Stdout, "deployment %s applied (generation %d)\n", d.Spec.Name, d.Generation)
	return 0
}

func runScale(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "scale", "DEPLOYMENT REPLICAS")
	srv := serverFlag(fs, e)
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 {
		fs.Usage()
		return 2
	}
	n, err := strconv.Atoi(pos[1])
	if err != nil || n < 0 {
		fmt.Fprintf(e.Stderr, "gangway scale: replicas %q: want a non-negative integer\n", pos[1])
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if _, err := c.Scale(ctx, pos[0], n); err != nil {
		return fail(e, err)
	}
	fmt.Fprintf(e.Stdout, "deployment %s scaled to %d\n", pos[0], n)
	return 0
}

func runDelete(ctx context.Context, e *Env, args []string) int {
	args = splitKindNames(args)
	if len(args) > 0 && (args[0] == "job" || args[0] == "jobs") {
		return runCancel(ctx, e, args[1:]) // kubectl's delete job: gangway's cancel
	}
	fs := cmdkit.NewFlags(e.Stderr, "delete", "deployment NAME | job ID... [cancel's flags] (or deployment/NAME, job/ID)")
	srv := serverFlag(fs, e)
	pos, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(pos) != 2 || (pos[0] != "deployment" && pos[0] != "deployments") {
		fs.Usage()
		return 2
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	if err := c.DeleteDeployment(ctx, pos[1]); err != nil {
		return fail(e, err)
	}
	fmt.Fprintf(e.Stdout, "deployment %s: deleting (replicas are being stopped)\n", pos[1])
	return 0
}

func printDeployments(w io.Writer, ds []*api.Deployment) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tENGINE\tMODEL\tGPUS/REPLICA\tREADY\tDESIRED\tGEN\tREASON")
	for _, d := range ds {
		ready := fmt.Sprintf("%d/%d", d.Status.Ready, len(d.Status.Replicas))
		reason := d.Status.Reason
		if d.Status.Deleting {
			reason = "deleting"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%d\t%s\n", d.Spec.Name, dash(string(d.Spec.Engine)), d.Spec.Model,
			d.Spec.GPUsPerReplica, ready, d.Status.Desired, d.Generation, truncate(reason, 60))
	}
	tw.Flush()
}

func describeDeployment(w io.Writer, d *api.Deployment) {
	s := &d.Spec
	fmt.Fprintf(w, "Deployment %s (generation %d)\n", s.Name, d.Generation)
	fmt.Fprintf(w, "  Engine:    %s serving %s as %q, %s, %d GPU(s) per replica\n", dash(string(s.Engine)), s.Model, s.ServedModelName, s.Quantization, s.GPUsPerReplica)
	scale := fmt.Sprintf("%d replicas", s.Replicas)
	if s.Autoscale {
		scale = fmt.Sprintf("autoscaled between %d and %d", s.MinReplicas, s.MaxReplicas)
	}
	fmt.Fprintf(w, "  Scale:     %s; desired now %d, ready %d\n", scale, d.Status.Desired, d.Status.Ready)
	if d.Status.Reason != "" {
		fmt.Fprintf(w, "  Reason:    %s\n", d.Status.Reason)
	}
	fmt.Fprintf(w, "  Queue:     %s (priority %d)\n", s.Queue, s.Priority)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  JOB\tGEN\tENDPOINT\tREADY\tSTATE")
	for _, r := range d.Status.Replicas {
		state := "serving"
		switch {
		case r.Retiring:
			state = "retiring"
		case r.Endpoint == "":
			state = "pending"
		case !r.Ready:
			state = "starting"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%v\t%s\n", r.JobID, r.Generation, dash(r.Endpoint), r.Ready, state)
	}
	tw.Flush()
	if len(d.Status.Replicas) > 0 {
		fmt.Fprintf(w, "  Replica jobs: gangway describe job %s\n", strings.Join(replicaIDs(d), " | "))
	}
}

func replicaIDs(d *api.Deployment) []string {
	ids := make([]string, len(d.Status.Replicas))
	for i, r := range d.Status.Replicas {
		ids[i] = r.JobID
	}
	return ids
}
