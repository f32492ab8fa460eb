package engine

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
)

// The simulator's tokenizer: a prompt is cut into tokens of bytesPerToken bytes (the last
// one shorter). Real tokenizers average roughly four bytes per token on English text, so
// token counts stay plausible, and the split is deterministic and free, which is all a
// simulator needs: the router, the engines and the tests all agree on counts and hashes.
const bytesPerToken = 4

// CountTokens returns the number of tokens of text: ceil(len/4), at least 1 (an empty
// prompt still costs one token, like a BOS token).
func CountTokens(text string) int {
	return max(1, (len(text)+bytesPerToken-1)/bytesPerToken)
}

// PrefixHashes returns the chained hashes of the full blocks of blockSize tokens of text,
// as the engines' prefix caches and the KV hub's content store key them. Hash i covers
// the whole prefix up to the end of block i, so equal hashes mean equal prefixes. model
// seeds the chain (vLLM also mixes the LoRA adapter into its block hashes), so the same
// text under another adapter never hits.
func PrefixHashes(model, text string, blockSize int) []uint64 {
	hashes, _ := promptHashes(model, text, blockSize)
	return hashes
}

// promptHashes returns PrefixHashes plus a hash of the whole prompt, partial tail block
// included, which identifies an exact prompt in the KV hub.
func promptHashes(model, text string, blockSize int) (blocks []uint64, whole uint64) {
	blockBytes := blockSize * bytesPerToken
	h := fnv.New64a()
	_, _ = h.Write([]byte(model))
	prev := h.Sum64()
	var buf [8]byte
	chain := func(chunk string) uint64 {
		h.Reset()
		binary.LittleEndian.PutUint64(buf[:], prev)
		_, _ = h.Write(buf[:])
		_, _ = h.Write([]byte(chunk))
		return h.Sum64()
	}
	off := 0
	for ; off+blockBytes <= len(text); off += blockBytes {
		prev = chain(text[off : off+blockBytes])
		blocks = append(blocks, prev)
	}
	whole = chain(text[off:] + "\x00end")
	return blocks, whole
}

// generatedWord is the text of the i-th generated token. Words are deterministic so
// tests can check content, and one word is exactly one token.
func generatedWord(i int) string {
	if i == 0 {
		return fmt.Sprintf("tok%d", i)
	}
	return fmt.Sprintf(" tok%d", i)
}

// generatedText is the full completion of n tokens: "tok0 tok1 ...".
func generatedText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(generatedWord(i))
	}
	return b.String()
}

// chatMessage is one message of a chat completion request. Content is either a string
// or an array of parts ({type:"text", text}); non-text parts are ignored.
type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// contentText flattens a message's content to text.
func (m chatMessage) contentText() (string, error) {
	c := bytes.TrimSpace(m.Content)
	if len(c) == 0 || string(c) == "null" {
		return "", nil
	}
	if c[0] == '"' {
		var s string
		err := json.Unmarshal(c, &s)
		return s, err
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(c, &parts); err != nil {
		return "", errors.New("message content must be a string or an array of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" || p.Type == "" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}

// chatPromptText renders chat messages as the simulator's chat template: "role: content\n"
// per message.
func chatPromptText(msgs []chatMessage) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		text, err := m.contentText()
		if err != nil {
			return "", err
		}
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(text)
		b.WriteString("\n")
	}
	return b.String(), nil
}

// completionPromptText flattens the prompt of /v1/completions: a string, an array of
// strings (concatenated), or token ids (an array of ints, or an array of such arrays),
// each id rendered as exactly one 4-byte token so that counts stay exact.
func completionPromptText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", errors.New("prompt is required")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return "", errors.New("prompt must be a string, an array of strings or an array of token ids")
	}
	var b strings.Builder
	for _, it := range items {
		var str string
		if json.Unmarshal(it, &str) == nil {
			b.WriteString(str)
			continue
		}
		var id uint32
		if json.Unmarshal(it, &id) == nil {
			var tok [4]byte
			binary.LittleEndian.PutUint32(tok[:], id)
			b.Write(tok[:])
			continue
		}
		nested, err := completionPromptText(it)
		if err != nil {
			return "", err
		}
		b.WriteString(nested)
	}
	return b.String(), nil
}

// PromptText returns the prompt text of an OpenAI request body as the simulator
// tokenizes it: the chat template for bodies with "messages", the prompt otherwise.
// A router can use it with CountTokens and PrefixHashes to predict an engine's view.
func PromptText(body []byte) (string, error) {
	var req struct {
		Messages []chatMessage   `json:"messages"`
		Prompt   json.RawMessage `json:"prompt"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return "", err
	}
	if req.Messages != nil {
		return chatPromptText(req.Messages)
	}
	return completionPromptText(req.Prompt)
}
