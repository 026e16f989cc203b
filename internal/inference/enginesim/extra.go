package enginesim

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"

	"github.com/gangway/gangway/internal/inference/openai"
)

// unsupportedKeys are request fields a real vLLM honours and the
// simulator cannot: a request that sets one is refused (400,
// unsupported_parameter) rather than answered as if it were absent.
var unsupportedKeys = []string{"logprobs", "top_logprobs", "tools", "tool_choice", "functions", "function_call", "response_format", "best_of", "echo", "guided_json", "guided_regex", "guided_choice"}

// unsupported names the first field of body the simulator cannot honour
// with the value given, "" when none. Bodies that mention none of the
// keys are not decoded again.
func unsupported(body []byte, n int) string {
	if n > 1 {
		return "n"
	}
	found := false
	for _, k := range unsupportedKeys {
		if bytes.Contains(body, []byte(`"`+k+`"`)) {
			found = true
			break
		}
	}
	if !found {
		return ""
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return ""
	}
	for _, k := range unsupportedKeys {
		v, ok := top[k]
		if !ok {
			continue
		}
		switch strings.TrimSpace(string(v)) {
		case "null", "false", "[]", "{}", "0", `"none"`, `"auto"`:
			continue // the default: nothing asked
		}
		if k == "response_format" && isTextFormat(v) {
			continue
		}
		return k
	}
	return ""
}

func isTextFormat(v json.RawMessage) bool {
	var f struct {
		Type string `json:"type"`
	}
	return json.Unmarshal(v, &f) == nil && f.Type == "text"
}

// handleModel is GET /v1/models/{id}.
func (s *Server) handleModel(w http.ResponseWriter, r *http.Request) {
	if id := r.PathValue("id"); id != s.cfg.ServedModelName {
		openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", id))
		return
	}
	openai.WriteJSON(w, http.StatusOK, s.model())
}

func (s *Server) model() openai.Model {
	return openai.Model{
		ID: s.cfg.ServedModelName, Object: "model", Created: s.start.Unix(), OwnedBy: "vllm",
		Root: s.cfg.Engine.Model.Name, MaxModelLen: s.cfg.Engine.MaxModelLen,
	}
}

// defaultEmbeddingDims is the length of a simulated embedding when the
// request names none: the size of common embedding models' vectors.
const defaultEmbeddingDims = 1024

// handleEmbeddings is POST /v1/embeddings: a deterministic unit vector
// per input, seeded by its tokens, so equal inputs embed equally. The
// engine's batch is not used: an embedding costs one prefill, which the
// simulator does not time.
func (s *Server) handleEmbeddings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string          `json:"model"`
		Input          json.RawMessage `json:"input"`
		EncodingFormat string          `json:"encoding_format"`
		Dimensions     *int            `json:"dimensions"`
	}
	body, err := openai.ReadBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, s.cfg.MaxBodyBytes)
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("request body: %v", err))
		return
	}
	if req.Model != s.cfg.ServedModelName {
		openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	inputs, err := embeddingInputs(req.Input, s.cfg.Engine.Model.Vocab)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf(`field "input": %v`, err))
		return
	}
	dims := defaultEmbeddingDims
	if req.Dimensions != nil {
		if *req.Dimensions < 1 || *req.Dimensions > 65536 {
			openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf(`field "dimensions": %d, want 1 to 65536`, *req.Dimensions))
			return
		}
		dims = *req.Dimensions
	}
	if req.EncodingFormat != "" && req.EncodingFormat != "float" && req.EncodingFormat != "base64" {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf(`field "encoding_format": %q, want "float" or "base64"`, req.EncodingFormat))
		return
	}
	type embedding struct {
		Object    string `json:"object"`
		Index     int    `json:"index"`
		Embedding any    `json:"embedding"`
	}
	out := struct {
		ID     string        `json:"id"`
		Object string        `json:"object"`
		Model  string        `json:"model"`
		Data   []embedding   `json:"data"`
		Usage  *openai.Usage `json:"usage"`
	}{ID: "embd-" + string(openai.AppendHex16(nil, s.ids.Add(1))), Object: "list", Model: s.cfg.ServedModelName, Usage: &openai.Usage{}}
	for i, toks := range inputs {
		if len(toks) > s.cfg.Engine.MaxModelLen {
			openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("input %d has %d tokens; this model's maximum context length is %d tokens", i, len(toks), s.cfg.Engine.MaxModelLen))
			return
		}
		v := embed(toks, dims)
		e := embedding{Object: "embedding", Index: i, Embedding: v}
		if req.EncodingFormat == "base64" {
			b := make([]byte, 4*len(v))
			for j, x := range v {
				binary.LittleEndian.PutUint32(b[4*j:], math.Float32bits(x))
			}
			e.Embedding = base64.StdEncoding.EncodeToString(b)
		}
		out.Data = append(out.Data, e)
		out.Usage.PromptTokens += len(toks)
	}
	out.Usage.TotalTokens = out.Usage.PromptTokens
	openai.WriteJSON(w, http.StatusOK, out)
}

// embeddingInputs reads OpenAI's input forms: a string, a list of
// strings, a list of token ids, or a list of such lists.
func embeddingInputs(raw json.RawMessage, vocab int) ([][]uint32, error) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "" {
			return nil, fmt.Errorf("empty")
		}
		return [][]uint32{openai.Tokenize([]byte(one), vocab)}, nil
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		out := make([][]uint32, len(many))
		for i, s := range many {
			if s == "" {
				return nil, fmt.Errorf("input %d is empty", i)
			}
			out[i] = openai.Tokenize([]byte(s), vocab)
		}
		return out, nil
	}
	var ids []uint32
	if json.Unmarshal(raw, &ids) == nil && len(ids) > 0 {
		return [][]uint32{ids}, nil
	}
	var idss [][]uint32
	if json.Unmarshal(raw, &idss) == nil && len(idss) > 0 {
		return idss, nil
	}
	return nil, fmt.Errorf("want a string, a list of strings, or token ids")
}

// embed is a unit vector of dims floats drawn from the tokens' seed.
func embed(toks []uint32, dims int) []float32 {
	seed := openai.PromptSeed(toks)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	v := make([]float32, dims)
	var norm float64
	for i := range v {
		x := rng.NormFloat64()
		v[i] = float32(x)
		norm += x * x
	}
	norm = math.Sqrt(norm)
	for i := range v {
		v[i] = float32(float64(v[i]) / norm)
	}
	return v
}

// handleTokenize is vLLM's POST /tokenize: the prompt's tokens under the
// simulator's tokenizer.
func (s *Server) handleTokenize(w http.ResponseWriter, r *http.Request) {
	body, err := openai.ReadBody(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes), r.ContentLength, s.cfg.MaxBodyBytes)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, fmt.Sprintf("read request body: %v", err))
		return
	}
	path := openai.PathCompletions
	if bytes.Contains(body, []byte(`"messages"`)) {
		path = openai.PathChatCompletions
	}
	p, err := openai.ParsePrompt(path, body)
	if err != nil {
		openai.WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if p.Model != s.cfg.ServedModelName {
		openai.WriteErrorCode(w, http.StatusNotFound, openai.CodeModelNotFound, fmt.Sprintf("The model `%s` does not exist.", p.Model))
		return
	}
	toks := p.Tokens(s.cfg.Engine.Model.Vocab)
	openai.WriteJSON(w, http.StatusOK, map[string]any{"count": len(toks), "max_model_len": s.cfg.Engine.MaxModelLen, "tokens": toks})
}

// engineRoutes are the methods of the paths the simulator serves, for
// 405 answers.
var engineRoutes = map[string]string{
	openai.PathHealth: http.MethodGet, "/version": http.MethodGet, openai.PathModels: http.MethodGet,
	openai.PathMetrics: http.MethodGet, openai.PathCompletions: http.MethodPost, openai.PathChatCompletions: http.MethodPost,
	openai.PathEmbeddings: http.MethodPost, openai.PathTokenize: http.MethodPost,
}

// noRoute answers what no route took: 405 with Allow for a known path,
// else 404, both in OpenAI's error shape.
func noRoute(w http.ResponseWriter, r *http.Request) {
	allow := engineRoutes[r.URL.Path]
	if allow == "" && strings.HasPrefix(r.URL.Path, openai.PathModels+"/") {
		allow = http.MethodGet
	}
	openai.WriteNoRoute(w, r, allow)
}
