package openai

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTokenizePrefixStable(t *testing.T) {
	a := Tokenize("You are a helpful assistant. Question one?", 1000)
	b := Tokenize("You are a helpful assistant. Another question", 1000)
	common := len("You are a helpful assistant. ") / BytesPerToken
	if diff := cmp.Diff(a[:common], b[:common]); diff != "" {
		t.Errorf("shared prefix tokenized differently:\n%s", diff)
	}
	if CountTokens(len("abcde")) != 2 || len(Tokenize("abcde", 0)) != 2 {
		t.Error("5 bytes should be 2 tokens")
	}
	ha := BlockHashes(seqTokens(0, 40), 16)
	hb := BlockHashes(append(seqTokens(0, 16), seqTokens(99, 24)...), 16)
	if len(ha) != 2 || ha[0] != hb[0] || ha[1] == hb[1] {
		t.Errorf("hash chain: %x vs %x", ha, hb)
	}
	if got := AppendBlockHashes(ha[:1], seqTokens(0, 40), 16); got[1] != ha[1] {
		t.Error("AppendBlockHashes does not continue the chain")
	}
}

func seqTokens(start, n int) []uint32 {
	out := make([]uint32, n)
	for i := range out {
		out[i] = uint32(start + i)
	}
	return out
}

// TestAppendBlockHashIsTheChain: hashing block by block, as the engine
// does over a prompt and its output, gives BlockHashes' chain.
func TestAppendBlockHashIsTheChain(t *testing.T) {
	toks := seqTokens(7, 16*5+3)
	var got []uint64
	for b := 0; (b+1)*16 <= len(toks); b++ {
		got = AppendBlockHash(got, toks[b*16:(b+1)*16])
	}
	if diff := cmp.Diff(BlockHashes(toks, 16), got); diff != "" {
		t.Errorf("block by block (-BlockHashes +AppendBlockHash):\n%s", diff)
	}
}
