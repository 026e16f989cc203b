package cli

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gangway/gangway/internal/api"
	"github.com/gangway/gangway/internal/base/cmdkit"
	"github.com/gangway/gangway/internal/base/pki"
)

// runToken is `gangway token create|list|revoke`: user tokens (who may do
// what) and join tokens (for agents), admins only.
func runToken(ctx context.Context, e *Env, args []string) int {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		fmt.Fprintln(e.Stderr, `Usage: gangway token create --user NAME [--role user|admin|viewer] [--groups G,...] [--uid N --gid N] [--ttl D]
       gangway token create --kind join [--ttl 1h] [--uses N]
       gangway token list
       gangway token revoke ID`)
		return 2
	}
	verb := args[0]
	fs := cmdkit.NewFlags(e.Stderr, "token "+verb, "[flags]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	kind := fs.String("kind", api.TokenUser, "user (a person or script) or join (an agent's first start)")
	user := fs.String("user", "", "user the token authenticates")
	role := fs.String("role", string(api.RoleUser), "admin, user or viewer")
	groups := fs.String("groups", "", "comma-separated groups (queues may admit groups)")
	uid := fs.Int("uid", -1, "Unix uid the user's jobs run as (default: the account of that name on the server)")
	gid := fs.Int("gid", -1, "Unix gid (default: the uid)")
	ttl := fs.Duration("ttl", 0, "how long the token lasts (default 90 days; 1h for join tokens)")
	uses := fs.Int("uses", 1, "join tokens: how many agents it admits")
	desc := fs.String("description", "", "a note for operators")
	pos, code, ok := cmdkit.ParseArgs(fs, args[1:])
	if !ok {
		return code
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	switch verb {
	case "list":
		ts, err := c.Tokens(ctx)
		if err != nil {
			return fail(e, err)
		}
		if *out != "table" {
			return exitOn(e, printAs(e, *out, ts))
		}
		printTokens(e.Stdout, ts)
		return 0
	case "revoke":
		if len(pos) != 1 {
			fs.Usage()
			return 2
		}
		t, err := c.RevokeToken(ctx, pos[0])
		if err != nil {
			return fail(e, err)
		}
		fmt.Fprintf(e.Stdout, "token %s (%s) revoked\n", t.ID, tokenWho(t))
		return 0
	}
	req := api.TokenRequest{Kind: *kind, TTL: api.Duration(*ttl), Description: *desc}
	if *kind == api.TokenJoin {
		req.Uses = *uses
	} else {
		req.User, req.Role, req.Groups = *user, api.Role(*role), splitList(*groups)
		if *uid >= 0 {
			req.UID = uid
		}
		if *gid >= 0 {
			req.GID = gid
		}
	}
	t, err := c.CreateToken(ctx, &req)
	if err != nil {
		return fail(e, err)
	}
	if *out != "table" {
		return exitOn(e, printAs(e, *out, t))
	}
	fmt.Fprintln(e.Stdout, t.Secret)
	if t.Kind == api.TokenJoin {
		fmt.Fprintf(e.Stderr, "join token %s: admits %d agent(s) until %s; on each node:\n  gangway agent --server %s --ca-file CA.crt --join %s\n",
			t.ID, t.UsesLeft, t.ExpiresAt.Local().Format(time.DateTime), c.Server(), t.Secret)
	} else {
		fmt.Fprintf(e.Stderr, "token %s for %s, until %s; shown once: give it with --token, $GANGWAY_TOKEN or a client config context\n",
			t.ID, tokenWho(&t.Token), t.ExpiresAt.Local().Format(time.DateTime))
	}
	return 0
}

func tokenWho(t *api.Token) string {
	if t.Kind == api.TokenJoin {
		return "join"
	}
	return fmt.Sprintf("%s, %s", t.User, t.Role)
}

func printTokens(w io.Writer, ts []*api.Token) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tUSER\tROLE\tUID\tEXPIRES\tSTATE\tDESCRIPTION")
	now := time.Now()
	for _, t := range ts {
		uid := "-"
		if t.RunAs != nil {
			uid = fmt.Sprintf("%d:%d", t.RunAs.UID, t.RunAs.GID)
		}
		state := "valid"
		switch {
		case !t.RevokedAt.IsZero():
			state = "revoked"
		case now.After(t.ExpiresAt):
			state = "expired"
		case t.Kind == api.TokenJoin && t.UsesLeft <= 0:
			state = "used"
		case t.Kind == api.TokenJoin:
			state = fmt.Sprintf("%d uses left", t.UsesLeft)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, dash(t.User), dash(string(t.Role)), uid,
			t.ExpiresAt.Local().Format(time.DateTime), state, dash(t.Description))
	}
	tw.Flush()
}

// runNode is `gangway node revoke NAME` (and the node actions by their
// other name: cordon, uncordon, drain).
func runNode(ctx context.Context, e *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(e.Stderr, "Usage: gangway node revoke|cordon|uncordon|drain NAME")
		return 2
	}
	switch args[0] {
	case "revoke", "cordon", "uncordon", "drain":
		return nodeActionCmd(args[0])(ctx, e, args[1:])
	}
	fmt.Fprintf(e.Stderr, "gangway node: unknown action %q (want revoke, cordon, uncordon or drain)\n", args[0])
	return 2
}

// runWhoami prints who the server takes the caller for.
func runWhoami(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "whoami", "")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	w, err := c.WhoAmI(ctx)
	if err != nil {
		return fail(e, err)
	}
	if *out != "table" {
		return exitOn(e, printAs(e, *out, w))
	}
	runAs := "the agents' own user"
	if w.RunAs != nil {
		runAs = fmt.Sprintf("uid %d, gid %d", w.RunAs.UID, w.RunAs.GID)
	}
	fmt.Fprintf(e.Stdout, "%s %s (role %s, by %s); jobs run as %s\n", w.Kind, w.Name, dash(string(w.Role)), w.Via, runAs)
	if len(w.Groups) > 0 {
		fmt.Fprintf(e.Stdout, "groups: %s\n", strings.Join(w.Groups, ", "))
	}
	return 0
}

// runAudit prints the newest audit records (admins only).
func runAudit(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "audit", "[--who USER] [--since 1h] [--limit N]")
	srv := serverFlag(fs, e)
	out := cmdkit.OutputFlag(fs)
	whoF := fs.String("who", "", "only this caller's requests")
	since := fs.Duration("since", 0, "only requests this recent")
	limit := fs.Int("limit", 50, "at most this many, the newest")
	if code, ok := cmdkit.ParseNoArgs(fs, args); !ok {
		return code
	}
	c, err := srv.client()
	if err != nil {
		return fail(e, err)
	}
	var from time.Time
	if *since > 0 {
		from = time.Now().Add(-*since)
	}
	rs, err := c.Audit(ctx, *whoF, from, *limit)
	if err != nil {
		return fail(e, err)
	}
	if *out != "table" {
		return exitOn(e, printAs(e, *out, rs))
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tWHO\tMETHOD\tPATH\tFROM\tCODE\tERROR")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", r.Time.Local().Format(time.DateTime), dash(r.Who), r.Method, r.Path, r.Remote, r.Code, truncate(r.Error, 60))
	}
	tw.Flush()
	return 0
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// runCA makes a cluster CA for several server replicas to share
// (--tls-ca, --tls-ca-key): `gangway ca create DIR`.
func runCA(ctx context.Context, e *Env, args []string) int {
	fs := cmdkit.NewFlags(e.Stderr, "ca", "create DIR")
	rest, code, ok := cmdkit.ParseArgs(fs, args)
	if !ok {
		return code
	}
	if len(rest) != 2 || rest[0] != "create" {
		fmt.Fprintln(e.Stderr, "usage: gangway ca create DIR   (writes DIR/ca.crt and DIR/ca.key, the key readable by its owner only)")
		return 2
	}
	ca, created, err := pki.LoadOrCreateCA(rest[1])
	if err != nil {
		return fail(e, err)
	}
	if !created {
		return fail(e, fmt.Errorf("%s already holds a CA; not replacing it", rest[1]))
	}
	fmt.Fprintf(e.Stdout, "made the cluster CA %q in %s: give every server replica --tls-ca %s --tls-ca-key %s\n",
		ca.Cert.Subject.CommonName, rest[1], filepath.Join(rest[1], pki.CAFile), filepath.Join(rest[1], pki.CAKeyFile))
	return 0
}
