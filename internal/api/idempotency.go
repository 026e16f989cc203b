package api

import "fmt"

// Idempotency keys on job submission (POST /v1/jobs), as Stripe's API and
// the IETF's draft-ietf-httpapi-idempotency-key-header have them: a client
// that sends a key and does not hear back sends the same request with the
// same key again, and the server answers what the first one created
// instead of creating it twice.
const (
	// IdempotencyKeyHeader carries the key: 1 to MaxIdempotencyKey
	// printable ASCII characters, bare or as a quoted string (the draft's
	// structured-field form).
	IdempotencyKeyHeader = "Idempotency-Key"
	// IdempotentReplayedHeader is "true" on an answer that a request with
	// the same key already got: nothing was created this time.
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKey bounds a key's length.
	MaxIdempotencyKey = 255
)

// ParseIdempotencyKey returns the key a header value carries, or an error
// naming the header that says what a key must be.
func ParseIdempotencyKey(v string) (string, error) {
	k := v
	if len(k) >= 2 && k[0] == '"' && k[len(k)-1] == '"' {
		k = k[1 : len(k)-1]
	}
	bad := func(why string) (string, error) {
		return "", ErrorForField(IdempotencyKeyHeader, "%s: want 1 to %d printable ASCII characters, such as a random UUID", why, MaxIdempotencyKey)
	}
	switch {
	case k == "":
		return bad("empty")
	case len(k) > MaxIdempotencyKey:
		return bad(fmt.Sprintf("%d characters long", len(k)))
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x20 || c > 0x7e || (c == '"' || c == '\\') && k != v {
			return bad(fmt.Sprintf("character %d is %q", i+1, c))
		}
	}
	return k, nil
}
