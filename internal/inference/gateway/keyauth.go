package gateway

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gangway/gangway/internal/inference/openai"
)

// KeyUsage is what one key name did since the gateway started. Usage
// returns it by KeyInfo.Name; requests without a valid key are counted
// under the name "" (only Unauthorized is ever set there).
type KeyUsage struct {
	// Requests admitted: authenticated, allowed the model and within the
	// key's limits. A request admitted and then not answered by an engine
	// (queue timeout, every replica failing) counts here too.
	Requests int64
	// PromptTokens and CompletionTokens of admitted requests that an
	// engine answered: the prompt as the gateway counts it (the shared
	// tokenizer's estimate, or the token ids sent), the completion as the
	// engine reported it (usage.completion_tokens) or streamed it (one
	// event per token).
	PromptTokens, CompletionTokens int64
	// Refusals, by reason: 401 (no key, or a key Keys does not know), 404
	// model_not_found (a model the key may not use), 429 over
	// RequestsPerMinute and 429 over TokensPerMinute.
	Unauthorized, ModelDenied, RequestLimited, TokenLimited int64
}

// keyState is one key name's rate limiters and usage.
type keyState struct {
	name string

	mu       sync.Mutex // guards the fields below
	rpm, tpm int        // the limits reqs and toks are set to
	reqs     *rate.Limiter
	toks     *rate.Limiter // nil: no limit; so for reqs
	// credit is tokens settled back to the key (its requests reserved
	// more than they used) and not yet spent: rate.Limiter cannot give
	// tokens back, so admission spends credit before the bucket. It never
	// exceeds what the bucket lacks of full (creditLocked).
	credit int
	usage  KeyUsage
}

// keyState returns the state of info.Name, made on first use, with its
// limiters set to info's limits (a Keys that changes a key's limits
// changes them here on the key's next request).
func (g *Gateway) keyState(info KeyInfo, now time.Time) *keyState {
	v, ok := g.keyStates.Load(info.Name)
	if !ok {
		v, _ = g.keyStates.LoadOrStore(info.Name, &keyState{name: info.Name})
	}
	ks := v.(*keyState)
	ks.mu.Lock()
	ks.setLimitsLocked(info.RequestsPerMinute, info.TokensPerMinute, now)
	ks.mu.Unlock()
	return ks
}

// perMinute makes a limiter of n per minute that holds a minute's worth:
// a fresh key may spend its whole minute at once, then n/60 a second.
func perMinute(lim *rate.Limiter, n int, now time.Time) *rate.Limiter {
	switch {
	case n <= 0:
		return nil
	case lim == nil:
		return rate.NewLimiter(rate.Limit(float64(n)/60), n)
	}
	lim.SetLimitAt(now, rate.Limit(float64(n)/60))
	lim.SetBurstAt(now, n)
	return lim
}

func (ks *keyState) setLimitsLocked(rpm, tpm int, now time.Time) {
	if rpm != ks.rpm {
		ks.reqs, ks.rpm = perMinute(ks.reqs, rpm, now), rpm
	}
	if tpm != ks.tpm {
		ks.toks, ks.tpm = perMinute(ks.toks, tpm, now), tpm
		ks.credit = 0
	}
}

// creditLocked trims credit to what the token bucket lacks of full at
// now (a real bucket would not have held more) and returns it.
func (ks *keyState) creditLocked(now time.Time) int {
	if ks.toks == nil {
		ks.credit = 0
		return 0
	}
	room := float64(ks.toks.Burst()) - ks.toks.TokensAt(now)
	ks.credit = max(0, min(ks.credit, int(math.Floor(room))))
	return ks.credit
}

// limitRefusal says why admit refused a request: which limit, and when
// retrying may succeed (0: never, the request alone is over the limit).
type limitRefusal struct {
	tokens     bool // TokensPerMinute; else RequestsPerMinute
	retryAfter time.Duration
	requested  int
}

// admit takes one request and tokens tokens from the key's buckets, or
// neither and says why not.
func (ks *keyState) admit(now time.Time, tokens int) *limitRefusal {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	var req *rate.Reservation
	if ks.reqs != nil {
		req = ks.reqs.ReserveN(now, 1)
		if d := req.DelayFrom(now); d > 0 {
			req.CancelAt(now)
			ks.usage.RequestLimited++
			return &limitRefusal{retryAfter: d, requested: 1}
		}
	}
	if ks.toks != nil {
		refuse := func(d time.Duration) *limitRefusal {
			if req != nil {
				req.CancelAt(now)
			}
			ks.usage.TokenLimited++
			return &limitRefusal{tokens: true, retryAfter: d, requested: tokens}
		}
		if tokens > ks.toks.Burst() {
			return refuse(0)
		}
		use := min(ks.creditLocked(now), tokens)
		if n := tokens - use; n > 0 {
			r := ks.toks.ReserveN(now, n)
			if d := r.DelayFrom(now); d > 0 {
				r.CancelAt(now)
				return refuse(d)
			}
		}
		ks.credit -= use
	}
	ks.usage.Requests++
	return nil
}

// settle ends an admitted request that reserved reserved tokens: an
// engine answered it (reached) with completion tokens after a prompt of
// prompt, or it never reached one and uses none. What it used beyond
// its reservation is taken from the bucket (into debt, delaying the
// key's next requests); what it did not use becomes credit.
func (ks *keyState) settle(now time.Time, reserved, prompt, completion int, reached bool) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	used := 0
	if reached {
		used = prompt + completion
		ks.usage.PromptTokens += int64(prompt)
		ks.usage.CompletionTokens += int64(completion)
	}
	if ks.toks == nil {
		return
	}
	if used < reserved {
		ks.credit += reserved - used
		ks.creditLocked(now)
		return
	}
	extra := used - reserved
	use := min(ks.creditLocked(now), extra)
	ks.credit -= use
	if extra -= use; extra > 0 {
		ks.toks.ReserveN(now, min(extra, ks.toks.Burst()))
	}
}

// limitHeaders are OpenAI's x-ratelimit-* headers for the key at now.
type limitHeaders struct {
	rpm, tpm                     int
	remainingReqs, remainingToks int
	resetReqs, resetToks         time.Duration
}

func (ks *keyState) headers(now time.Time) limitHeaders {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	h := limitHeaders{rpm: ks.rpm, tpm: ks.tpm}
	bucket := func(lim *rate.Limiter, extra int) (remaining int, reset time.Duration) {
		have := min(lim.TokensAt(now)+float64(extra), float64(lim.Burst()))
		lack := float64(lim.Burst()) - have
		return max(0, int(math.Floor(have))), time.Duration(lack / float64(lim.Limit()) * float64(time.Second)).Round(time.Millisecond)
	}
	if ks.reqs != nil {
		h.remainingReqs, h.resetReqs = bucket(ks.reqs, 0)
	}
	if ks.toks != nil {
		h.remainingToks, h.resetToks = bucket(ks.toks, ks.creditLocked(now))
	}
	return h
}

func (h limitHeaders) set(hdr http.Header) {
	if h.rpm > 0 {
		hdr.Set("X-Ratelimit-Limit-Requests", strconv.Itoa(h.rpm))
		hdr.Set("X-Ratelimit-Remaining-Requests", strconv.Itoa(h.remainingReqs))
		hdr.Set("X-Ratelimit-Reset-Requests", h.resetReqs.String())
	}
	if h.tpm > 0 {
		hdr.Set("X-Ratelimit-Limit-Tokens", strconv.Itoa(h.tpm))
		hdr.Set("X-Ratelimit-Remaining-Tokens", strconv.Itoa(h.remainingToks))
		hdr.Set("X-Ratelimit-Reset-Tokens", h.resetToks.String())
	}
}

// apiKey is the key the request names: Authorization: Bearer (what
// OpenAI's clients send), else x-api-key.
func apiKey(r *http.Request) string {
	if a := r.Header.Get("Authorization"); a != "" {
		if scheme, tok, ok := strings.Cut(a, " "); ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return r.Header.Get("X-Api-Key")
}

// authenticate returns the request's key and its state, or answers 401
// and returns ok false. With Config.Keys nil every request passes with a
// nil state.
func (g *Gateway) authenticate(w http.ResponseWriter, r *http.Request, now time.Time) (KeyInfo, *keyState, bool) {
	if g.cfg.Keys == nil {
		return KeyInfo{}, nil, true
	}
	key := apiKey(r)
	msg := "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY), or in an x-api-key header."
	if key != "" {
		if info, ok := g.cfg.Keys.Lookup(key); ok {
			return info, g.keyState(info, now), true
		}
		msg = "Incorrect API key provided."
	}
	ks := g.keyState(KeyInfo{}, now)
	ks.mu.Lock()
	ks.usage.Unauthorized++
	ks.mu.Unlock()
	w.Header().Set("WWW-Authenticate", `Bearer realm="gangway"`)
	openai.WriteOpenAIError(w, http.StatusUnauthorized, "invalid_request_error", "invalid_api_key", msg)
	return KeyInfo{}, nil, false
}

// denyModel answers a request for a model its key may not use as OpenAI
// does: 404 model_not_found, whether or not the model exists.
func (g *Gateway) denyModel(w http.ResponseWriter, ks *keyState, model string) {
	ks.mu.Lock()
	ks.usage.ModelDenied++
	ks.mu.Unlock()
	g.metrics.request(model, http.StatusNotFound)
	g.metrics.reject(model, "model_denied")
	openai.WriteOpenAIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", model))
}

// admitKey applies the key's rate limits to a request of tokens tokens
// (prompt plus expected completion), sets the x-ratelimit-* headers, and
// answers 429 when it is over a limit (returning false).
func (g *Gateway) admitKey(w http.ResponseWriter, ks *keyState, model string, tokens int, now time.Time) bool {
	refusal := ks.admit(now, tokens)
	h := ks.headers(now)
	h.set(w.Header())
	if refusal == nil {
		return true
	}
	g.metrics.request(model, http.StatusTooManyRequests)
	g.metrics.reject(model, "rate_limit")
	what, unit, limit, remaining := "requests", "RPM", h.rpm, h.remainingReqs
	if refusal.tokens {
		what, unit, limit, remaining = "tokens", "TPM", h.tpm, h.remainingToks
	}
	var msg string
	if refusal.retryAfter == 0 {
		msg = fmt.Sprintf("Request too large for key %s on %s per min (%s): Limit %d, Requested %d. The input or output tokens must be reduced in order to run successfully.",
			ks.name, what, unit, limit, refusal.requested)
	} else {
		secs := int(math.Ceil(refusal.retryAfter.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		msg = fmt.Sprintf("Rate limit reached for key %s on %s per min (%s): Limit %d, Used %d, Requested %d. Please try again in %v.",
			ks.name, what, unit, limit, limit-remaining, refusal.requested, refusal.retryAfter.Round(time.Millisecond))
	}
	openai.WriteOpenAIError(w, http.StatusTooManyRequests, what, "rate_limit_exceeded", msg)
	return false
}

// Usage returns each key name's usage since the gateway started (see
// KeyUsage); nil when Config.Keys is nil or no request came yet.
func (g *Gateway) Usage() map[string]KeyUsage {
	var out map[string]KeyUsage
	g.keyStates.Range(func(k, v any) bool {
		ks := v.(*keyState)
		ks.mu.Lock()
		u := ks.usage
		ks.mu.Unlock()
		if out == nil {
			out = map[string]KeyUsage{}
		}
		out[k.(string)] = u
		return true
	})
	return out
}
