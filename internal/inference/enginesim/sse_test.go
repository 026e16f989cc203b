package enginesim

import (
	"net/http/httptest"
	"testing"

	"github.com/gangway/gangway/internal/inference/openai"
	"github.com/google/go-cmp/cmp"
)

// TimeZero's one-piece SSE answer is byte for byte what the streaming
// responder writes through encoding/json.
func TestSSEAnswerMatchesResponder(t *testing.T) {
	for _, tc := range []struct {
		chat, usage bool
		model       string
		n           int
		reason      string
	}{
		{false, false, "sim", 16, FinishLength},
		{true, true, "Qwen3-8B", 3, FinishStop},
		{true, false, `we<i>rd "name" & ` + "\u2028\xff", 1, FinishLength},
		{false, true, "m", 0, FinishLength},
	} {
		const seed, id, created = 42, 0xbeef, 1700000000
		rec := httptest.NewRecorder()
		out := &responder{w: rec, p: openai.PromptRequest{Chat: tc.chat, Stream: true, IncludeUsage: tc.usage}, model: tc.model,
			created: created, promptTokens: 9, id: openai.ResponseID(tc.chat, id)}
		toks := make([]uint32, tc.n)
		for i := range toks {
			toks[i] = openai.GeneratedToken(seed, i)
		}
		if err := out.tokens(toks, true, tc.reason); err != nil {
			t.Fatal(err)
		}
		a := sseAnswer{chat: tc.chat, model: tc.model, created: created, id: id}
		got := a.appendAll(nil, seed, tc.n, tc.reason, tc.usage, 9)
		if tc.n == 0 {
			// The responder marks no token as the last; nothing to compare.
			continue
		}
		if d := cmp.Diff(rec.Body.String(), string(got)); d != "" {
			t.Errorf("%+v: (-responder +sseAnswer)\n%s", tc, d)
		}
	}
}
