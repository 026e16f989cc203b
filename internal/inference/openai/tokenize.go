package openai

import (
	"math/bits"
	"strings"
)

// BytesPerToken is how many bytes of text the simulated tokenizer folds
// into one token: about what BPE tokenizers average on English.
const BytesPerToken = 4

// Tokenize maps text to token ids, one per BytesPerToken bytes (the last
// may be shorter). It is deterministic and prefix-stable: two texts that
// share their first k bytes share their first k/BytesPerToken tokens, so
// shared prompt prefixes become shared KV blocks. Ids are below vocab
// (vocab <= 0 means 2^31).
func Tokenize[T ~string | ~[]byte](text T, vocab int) []uint32 {
	out := make([]uint32, CountTokens(len(text)))
	m := newTokenMod(vocab)
	full := len(text) / BytesPerToken
	for i := range full {
		j := i * BytesPerToken
		out[i] = m.token(uint32(text[j]) | uint32(text[j+1])<<8 | uint32(text[j+2])<<16 | uint32(text[j+3])<<24)
	}
	if full < len(out) {
		out[full] = tailToken(m, text[full*BytesPerToken:])
	}
	return out
}

// tokenMod reduces a chunk's mixed bits to an id below the vocabulary:
// by a mask for 2^31, by Lemire's multiply-shift otherwise, which is
// exact for 32-bit operands and avoids a division per token.
type tokenMod struct {
	d uint32
	m uint64 // ⌈2^64 / d⌉
}

func newTokenMod(vocab int) tokenMod {
	if vocab <= 0 {
		return tokenMod{}
	}
	d := uint32(vocab)
	return tokenMod{d: d, m: ^uint64(0)/uint64(d) + 1}
}

func (t tokenMod) reduce(x uint32) uint32 {
	if t.d == 0 {
		return x % (1 << 31)
	}
	hi, _ := bits.Mul64(t.m*uint64(x), uint64(t.d))
	return uint32(hi)
}

// token is the id of a full chunk of BytesPerToken bytes (little-endian).
func (t tokenMod) token(v uint32) uint32 { return t.reduce(uint32(mix64(uint64(v)) >> 32)) }

// tailToken is the id of the short last chunk: its length is part of
// its identity.
func tailToken[T ~string | ~[]byte](t tokenMod, chunk T) uint32 {
	v := uint64(len(chunk))
	for j := range len(chunk) {
		v = v<<8 | uint64(chunk[j])
	}
	return t.reduce(uint32(mix64(v|1<<40) >> 32))
}

// CountTokens is len(Tokenize(text, v)) for a text of n bytes, without
// building the slice.
func CountTokens(n int) int { return (n + BytesPerToken - 1) / BytesPerToken }

// hashSeed starts every hash chain; a different seed would mean a
// different model (vLLM mixes the model and LoRA into its block hashes).
const hashSeed uint64 = 0x9e3779b97f4a7c15

// BlockHashes returns the chained hash of each full block of blockSize
// tokens: hash i covers tokens [0, (i+1)·blockSize), so equal hashes mean
// equal prefixes. A trailing partial block gets no hash, as in vLLM.
func BlockHashes(tokens []uint32, blockSize int) []uint64 {
	return AppendBlockHashes(nil, tokens, blockSize)
}

// AppendBlockHashes extends hashes (the chain already computed for the
// first len(hashes) blocks of tokens) with the hashes of the remaining
// full blocks.
func AppendBlockHashes(hashes []uint64, tokens []uint32, blockSize int) []uint64 {
	for b := len(hashes); (b+1)*blockSize <= len(tokens); b++ {
		hashes = AppendBlockHash(hashes, tokens[b*blockSize:(b+1)*blockSize])
	}
	return hashes
}

// mix64 is the splitmix64 finaliser.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ChatMessage is one message of a chat conversation.
type ChatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// ChatPrompt renders messages with a ChatML template (Qwen's) and opens
// the assistant's turn. The gateway renders the same way, so its prefix
// index sees the tokens the engine caches.
func ChatPrompt(msgs []ChatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|im_start|>")
		b.WriteString(m.Role)
		b.WriteByte('\n')
		b.WriteString(m.Content)
		b.WriteString("<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String()
}

// outputWords are what generated tokens read as.
var outputWords = [...]string{
	" the", " of", " and", " to", " in", " is", " that", " for",
	" it", " as", " with", " on", " be", " at", " by", " this",
	" from", " or", " an", " are", " was", " we", " can", " all",
	" GPU", " model", " token", " cache", " batch", " step", " queue", " rank",
}

// TokenText is the text of generated token id.
func TokenText(id uint32) string { return outputWords[id%uint32(len(outputWords))] }

// AppendBlockHash extends hashes, the chain of the blocks before it, with
// the hash of the next block, whose tokens are block: for a caller that
// holds a sequence's tokens in pieces (a prompt and what was generated).
func AppendBlockHash(hashes []uint64, block []uint32) []uint64 {
	prev := hashSeed
	if len(hashes) > 0 {
		prev = hashes[len(hashes)-1]
	}
	return append(hashes, chainBlock(prev, block))
}

// chainBlock is one link of the hash chain of AppendBlockHashes.
func chainBlock(prev uint64, toks []uint32) uint64 {
	h := prev
	for _, t := range toks {
		h ^= uint64(t) + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2)
	}
	return mix64(h)
}

// GeneratedToken is the token the engine generates at output position i
// for a request with Seed seed: what a client would send back as the
// assistant's turn of a conversation.
func GeneratedToken(seed uint64, i int) uint32 { return genToken(seed, i) }

// genToken is the deterministic "sampled" token i of a request.
func genToken(seed uint64, i int) uint32 {
	return uint32(mix64(seed*0x2545f4914f6cdd1d+uint64(i)+1) >> 33)
}

// PromptSeed is the engine simulator's generation seed for a prompt of
// toks: a hash of the tokens.
func PromptSeed(toks []uint32) uint64 {
	h := uint64(1469598103934665603)
	for _, t := range toks {
		h = (h ^ uint64(t)) * 1099511628211
	}
	return mix64(h)
}

// Seed is PromptSeed(p.Tokens(vocab)) without building the tokens.
func (p PromptRequest) Seed(vocab int) uint64 {
	if p.TokenIDs != nil {
		return PromptSeed(p.TokenIDs)
	}
	m := newTokenMod(vocab)
	text := p.Prompt
	h := uint64(1469598103934665603)
	full := len(text) / BytesPerToken
	for i := range full {
		j := i * BytesPerToken
		t := m.token(uint32(text[j]) | uint32(text[j+1])<<8 | uint32(text[j+2])<<16 | uint32(text[j+3])<<24)
		h = (h ^ uint64(t)) * 1099511628211
	}
	if full*BytesPerToken < len(text) {
		h = (h ^ uint64(tailToken(m, text[full*BytesPerToken:]))) * 1099511628211
	}
	return mix64(h)
}
