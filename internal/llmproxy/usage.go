package llmproxy

import (
	"strconv"

	"github.com/agentplane/agentplane/internal/money"
)

// Usage is the token count of one call, normalised across the Chat
// Completions, Responses and Embeddings wire formats.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	// CachedTokens is the part of PromptTokens served from the prompt cache.
	CachedTokens int64
	// ReasoningTokens is the part of CompletionTokens spent on reasoning.
	ReasoningTokens int64
	TotalTokens     int64
}

// parseUsage reads a usage object (the bytes of `{…}` only), in the Chat
// Completions / Embeddings spelling (prompt/completion) or the Responses API
// one (input/output). It is a scan of the small object, without allocating.
func parseUsage(obj []byte) (Usage, bool) {
	var u Usage
	_, err := scanObject(obj, func(k []byte, v span) bool {
		val := obj[v.start:v.end]
		switch string(k) {
		case "prompt_tokens", "input_tokens":
			u.PromptTokens += jsonInt(val)
		case "completion_tokens", "output_tokens":
			u.CompletionTokens += jsonInt(val)
		case "total_tokens":
			u.TotalTokens = jsonInt(val)
		case "prompt_tokens_details", "input_tokens_details":
			u.CachedTokens += memberInt(val, "cached_tokens")
		case "completion_tokens_details", "output_tokens_details":
			u.ReasoningTokens += memberInt(val, "reasoning_tokens")
		}
		return true
	})
	if err != nil {
		return Usage{}, false
	}
	if u.TotalTokens == 0 {
		u.TotalTokens = u.PromptTokens + u.CompletionTokens
	}
	return u, true
}

// jsonInt is the value of a JSON integer; 0 for null or anything else.
func jsonInt(b []byte) int64 {
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// memberInt is the integer member key of the JSON object obj, or 0.
func memberInt(obj []byte, key string) int64 {
	if len(obj) == 0 || obj[0] != '{' {
		return 0
	}
	if v := findMember(obj, key); v.ok() {
		return jsonInt(obj[v.start:v.end])
	}
	return 0
}

// Price is what a model costs, in currency units per one million tokens.
type Price struct {
	Input float64 `yaml:"input" json:"input"`
	// CachedInput is the price of prompt tokens served from the cache; 0
	// means "same as Input" (providers that do not discount cached tokens).
	CachedInput float64 `yaml:"cached_input" json:"cached_input"`
	Output      float64 `yaml:"output" json:"output"`
}

// effective fills in the defaults so the price recorded is the one used.
func (p Price) effective() Price {
	if p.CachedInput == 0 {
		p.CachedInput = p.Input
	}
	return p
}

// Cost is the estimated cost of u at price p. Reasoning tokens are billed as
// output and are already part of CompletionTokens.
func (p Price) Cost(u Usage) float64 {
	p = p.effective()
	cached := min(u.CachedTokens, u.PromptTokens)
	c := float64(u.PromptTokens-cached)*p.Input +
		float64(cached)*p.CachedInput +
		float64(u.CompletionTokens)*p.Output
	return money.Round(c / 1e6)
}
