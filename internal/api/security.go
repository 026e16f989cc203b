package api

import (
	"fmt"
	"time"
)

// Security's wire types: who a caller is, the tokens that say so, the
// Unix identity a job runs as, and a node's join.

// Role is what a user token may do.
type Role string

// Roles, from most to least powerful.
const (
	// RoleAdmin may do everything: nodes, queues, tokens, anyone's jobs.
	RoleAdmin Role = "admin"
	// RoleUser submits to the queues it may use and sees, cancels,
	// reprioritises and reads the logs of its own jobs; others' jobs it
	// sees without their environment.
	RoleUser Role = "user"
	// RoleViewer reads everything but logs and environments.
	RoleViewer Role = "viewer"
)

// ValidRole reports whether r is one of the roles.
func ValidRole(r Role) bool { return r == RoleAdmin || r == RoleUser || r == RoleViewer }

// Token kinds.
const (
	// TokenUser authenticates a person (or a script) as a user with a role.
	TokenUser = "user"
	// TokenJoin lets an agent join once: it trades the token and a CSR for
	// a node certificate.
	TokenJoin = "join"
)

// RunAs is the Unix identity a job's ranks run under on every node (as
// Slurm, gangway relies on the same accounts on every node). Nil in an
// assignment: the agent's own user (jobs of admins without a mapping).
type RunAs struct {
	User string `json:"user,omitempty"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
}

// Who is the caller, as the server authenticated it (GET /v1/whoami).
type Who struct {
	// Kind is "user", "node" or "server".
	Kind string `json:"kind"`
	Name string `json:"name"`
	Role Role   `json:"role,omitempty"`
	// Groups come from the token or the OIDC claims; queues may allow them.
	Groups []string `json:"groups,omitempty"`
	RunAs  *RunAs   `json:"runAs,omitempty"`
	// Via is how it was authenticated: "token", "oidc", "certificate".
	Via string `json:"via"`
}

// TokenRequest asks for a token (POST /v1/tokens; admins only).
type TokenRequest struct {
	// Kind is "user" (default) or "join".
	Kind string `json:"kind,omitempty"`
	// User, Role and Groups say who a user token authenticates.
	User   string   `json:"user,omitempty"`
	Role   Role     `json:"role,omitempty"`
	Groups []string `json:"groups,omitempty"`
	// UID and GID map the user to a Unix account; nil: looked up by name
	// on the server (and then required for a non-admin).
	UID *int `json:"uid,omitempty"`
	GID *int `json:"gid,omitempty"`
	// TTL is the token's life; 0: 1h for join tokens, 90 days otherwise.
	TTL Duration `json:"ttl,omitempty"`
	// Uses bounds how many agents a join token admits. Default 1.
	Uses int `json:"uses,omitempty"`
	// Description is a note for operators.
	Description string `json:"description,omitempty"`
}

// Token is a token's record: everything but its secret, which is shown
// once, in TokenCreated.
type Token struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	User        string    `json:"user,omitempty"`
	Role        Role      `json:"role,omitempty"`
	Groups      []string  `json:"groups,omitempty"`
	RunAs       *RunAs    `json:"runAs,omitempty"`
	Description string    `json:"description,omitempty"`
	CreatedBy   string    `json:"createdBy,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt"`
	// UsesLeft is a join token's remaining admissions.
	UsesLeft  int       `json:"usesLeft,omitempty"`
	RevokedAt time.Time `json:"revokedAt,omitzero"`
	// Hash is the SHA-256 of the secret, hex; never sent to clients.
	Hash string `json:"hash,omitempty"`
	// ModRevision is the store revision of this copy; never stored.
	ModRevision int64 `json:"modRevision,omitempty"`
}

// TokenCreated answers POST /v1/tokens: the secret, shown this once.
type TokenCreated struct {
	Token
	Secret string `json:"secret"`
}

// Validate checks a token request's fields.
func (r *TokenRequest) Validate() error {
	var fe FieldErrors
	switch r.Kind {
	case "", TokenUser:
		if !validIdent(r.User) {
			fe.Add("user", "%q: use letters, digits, '-', '_' and '.' (at most 63)", r.User)
		}
		if r.Role == "" {
			r.Role = RoleUser
		}
		if !ValidRole(r.Role) {
			fe.Add("role", "%q: want admin, user or viewer", r.Role)
		}
		if r.Uses != 0 {
			fe.Add("uses", "only join tokens have uses")
		}
	case TokenJoin:
		if r.User != "" || r.Role != "" || len(r.Groups) > 0 || r.UID != nil || r.GID != nil {
			fe.Add("kind", "a join token names no user, role, groups or uid")
		}
		if r.Uses < 0 || r.Uses > 10000 {
			fe.Add("uses", "must be between 1 and 10000 (got %d)", r.Uses)
		}
	default:
		fe.Add("kind", "%q: want user or join", r.Kind)
	}
	for i, g := range r.Groups {
		if !validIdent(g) {
			fe.Add(fmt.Sprintf("groups[%d]", i), "%q: use letters, digits, '-', '_' and '.'", g)
		}
	}
	if len(r.Groups) > 64 {
		fe.Add("groups", "at most 64 (got %d)", len(r.Groups))
	}
	if r.UID != nil && (*r.UID < 0 || *r.UID > 1<<31-2) {
		fe.Add("uid", "must be between 0 and 2147483646 (got %d)", *r.UID)
	}
	if r.GID != nil && (*r.GID < 0 || *r.GID > 1<<31-2) {
		fe.Add("gid", "must be between 0 and 2147483646 (got %d)", *r.GID)
	}
	if r.TTL < 0 || r.TTL.D() > 10*365*24*time.Hour {
		fe.Add("ttl", "must be between 0 and 10 years (got %s)", r.TTL.D())
	}
	checkName(&fe, "description", r.Description)
	if len(r.Description) > 256 {
		fe.Add("description", "at most 256 characters")
	}
	return fe.Err()
}

// JoinRequest is an agent's first call (POST /v1/agent/join): a join token
// (or an admin's token) in the Authorization header, and a certificate
// signing request for the node's name.
type JoinRequest struct {
	Node string `json:"node"`
	// CSR is PEM; its common name must be the node's name.
	CSR string `json:"csr"`
}

// JoinAnswer carries the node's certificate and the cluster CA, PEM.
type JoinAnswer struct {
	Certificate string `json:"certificate"`
	CA          string `json:"ca"`
}

// AuditRecord is one mutating request, as the audit log keeps it.
type AuditRecord struct {
	Time   time.Time `json:"time"`
	Who    string    `json:"who"`
	Kind   string    `json:"kind,omitempty"`
	Role   Role      `json:"role,omitempty"`
	Method string    `json:"method"`
	Path   string    `json:"path"`
	Remote string    `json:"remote"`
	Code   int       `json:"code"`
	// Error is the refusal's message, if the request failed.
	Error string `json:"error,omitempty"`
}
