package fakellm

import (
	"encoding/json"
	"net/http"
)

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID       string `json:"id"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tool_calls"`
		ToolCallID string `json:"tool_call_id"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	Tools []struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// functions are the function tools the request offers.
func (r *chatRequest) functions() []toolSpec {
	var out []toolSpec
	for _, t := range r.Tools {
		if (t.Type == "function" || t.Type == "") && t.Function.Name != "" {
			out = append(out, toolSpec{Name: t.Function.Name, Description: t.Function.Description, Parameters: t.Function.Parameters})
		}
	}
	return out
}

// The wire types below keep OpenAI's field order, so the bytes look like the
// real thing.

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		AudioTokens  int `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int `json:"reasoning_tokens"`
		AudioTokens              int `json:"audio_tokens"`
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

func newChatUsage(u Usage) *chatUsage {
	cu := &chatUsage{PromptTokens: u.Prompt, CompletionTokens: u.Completion, TotalTokens: u.Total()}
	cu.PromptTokensDetails.CachedTokens = u.Cached
	cu.CompletionTokensDetails.ReasoningTokens = u.Reasoning
	return cu
}

type toolCallFunction struct {
	Name      string `json:"name,omitempty"`
	Arguments string `json:"arguments"`
}

type toolCall struct {
	Index    *int             `json:"index,omitempty"`
	ID       string           `json:"id,omitempty"`
	Type     string           `json:"type,omitempty"`
	Function toolCallFunction `json:"function"`
}

type chatMessage struct {
	Role        string     `json:"role"`
	Content     *string    `json:"content"`
	Refusal     *string    `json:"refusal"`
	ToolCalls   []toolCall `json:"tool_calls,omitempty"`
	Annotations []any      `json:"annotations"`
}

type chatChoice struct {
	Index        int         `json:"index"`
	Message      chatMessage `json:"message"`
	Logprobs     any         `json:"logprobs"`
	FinishReason string      `json:"finish_reason"`
}

type chatCompletion struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []chatChoice `json:"choices"`
	Usage             *chatUsage   `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type chunkDelta struct {
	Role      string     `json:"role,omitempty"`
	Content   *string    `json:"content,omitempty"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

type chunkChoice struct {
	Index        int        `json:"index"`
	Delta        chunkDelta `json:"delta"`
	Logprobs     any        `json:"logprobs"`
	FinishReason *string    `json:"finish_reason"`
}

type chatChunk struct {
	ID                string        `json:"id"`
	Object            string        `json:"object"`
	Created           int64         `json:"created"`
	Model             string        `json:"model"`
	ServiceTier       string        `json:"service_tier"`
	SystemFingerprint string        `json:"system_fingerprint"`
	Choices           []chunkChoice `json:"choices"`
	// Usage is null on every chunk and set on the last one when the client
	// asked for include_usage, and absent otherwise (as OpenAI does).
	Usage any `json:"usage,omitempty"`
}

var jsonNull = json.RawMessage("null")

// chatPlan is what the fake decided to answer.
type chatPlan struct {
	text     string // the assistant text, or
	toolName string // a call of this tool
	toolArgs string
	usage    Usage
}

func planChat(req *chatRequest) chatPlan {
	var r round
	r.userTurn("")
	names := map[string]string{} // tool call id → function name
	promptWords := 0
	for _, m := range req.Messages {
		t := contentText(m.Content)
		promptWords += words(t)
		switch m.Role {
		case "user":
			r.userTurn(t)
		case "assistant":
			for _, c := range m.ToolCalls {
				r.called[c.Function.Name] = true
				names[c.ID] = c.Function.Name
			}
		case "tool":
			r.results = append(r.results, toolResult{name: names[m.ToolCallID], output: t})
		}
		r.endsWithTool = m.Role == "tool"
	}
	var p chatPlan
	var t *toolSpec
	switch {
	case r.endsWithTool:
		t, p.text = r.afterTools(req.functions(), parseToolChoice(req.ToolChoice))
	default:
		if t = chooseTool(req.functions(), parseToolChoice(req.ToolChoice), r.lastUser); t == nil {
			p.text = Reply(r.lastUser)
		}
	}
	if t != nil {
		p.toolName = t.Name
		p.toolArgs = toolArguments(t, r.lastUser)
	}
	if p.toolName != "" {
		p.usage = usageFor(promptWords, len(argPieces(p.toolArgs)))
	} else {
		p.usage = usageFor(promptWords, len(Pieces(p.text)))
	}
	return p
}

func (ex *exchange) chat() {
	var req chatRequest
	if err := json.Unmarshal(ex.body, &req); err != nil {
		ex.error(http.StatusBadRequest, "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return
	}
	if req.Model == "" {
		ex.error(http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", "you must provide a model parameter")
		return
	}
	if len(req.Messages) == 0 {
		ex.error(http.StatusBadRequest, "invalid_request_error", "empty_array", "Invalid 'messages': empty array.")
		return
	}
	plan := planChat(&req)
	id := "chatcmpl-fake" + itoa(ex.s.seq.Add(1))
	if !req.Stream {
		msg := chatMessage{Role: "assistant", Annotations: []any{}}
		finish := "stop"
		if plan.toolName != "" {
			finish = "tool_calls"
			msg.ToolCalls = []toolCall{{ID: "call_fake" + itoa(ex.s.seq.Add(1)), Type: "function",
				Function: toolCallFunction{Name: plan.toolName, Arguments: plan.toolArgs}}}
		} else {
			msg.Content = &plan.text
		}
		ex.writeJSON(http.StatusOK, chatCompletion{
			ID: id, Object: "chat.completion", Created: ex.s.opts.Created, Model: req.Model,
			Choices:     []chatChoice{{Index: 0, Message: msg, FinishReason: finish}},
			Usage:       newChatUsage(plan.usage),
			ServiceTier: "default", SystemFingerprint: "fp_fakellm",
		})
		return
	}

	includeUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	st := ex.startStream()
	if st == nil {
		return
	}
	chunk := func(delta chunkDelta, finish *string) chatChunk {
		c := chatChunk{ID: id, Object: "chat.completion.chunk", Created: ex.s.opts.Created, Model: req.Model,
			ServiceTier: "default", SystemFingerprint: "fp_fakellm",
			Choices: []chunkChoice{{Index: 0, Delta: delta, FinishReason: finish}}}
		if includeUsage {
			c.Usage = jsonNull
		}
		return c
	}
	finish := "stop"
	if plan.toolName != "" {
		finish = "tool_calls"
		zero := 0
		first := chunkDelta{Role: "assistant", ToolCalls: []toolCall{{Index: &zero, ID: "call_fake" + itoa(ex.s.seq.Add(1)),
			Type: "function", Function: toolCallFunction{Name: plan.toolName}}}}
		if !st.json("", chunk(first, nil)) {
			return
		}
		for _, a := range argPieces(plan.toolArgs) {
			d := chunkDelta{ToolCalls: []toolCall{{Index: &zero, Function: toolCallFunction{Arguments: a}}}}
			if !st.json("", chunk(d, nil)) {
				return
			}
		}
	} else {
		empty := ""
		if !st.json("", chunk(chunkDelta{Role: "assistant", Content: &empty}, nil)) {
			return
		}
		for _, piece := range Pieces(plan.text) {
			if !st.json("", chunk(chunkDelta{Content: &piece}, nil)) {
				return
			}
		}
	}
	if !st.json("", chunk(chunkDelta{}, &finish)) {
		return
	}
	if includeUsage {
		last := chatChunk{ID: id, Object: "chat.completion.chunk", Created: ex.s.opts.Created, Model: req.Model,
			ServiceTier: "default", SystemFingerprint: "fp_fakellm", Choices: []chunkChoice{}, Usage: newChatUsage(plan.usage)}
		if !st.json("", last) {
			return
		}
	}
	if !st.event("", []byte("[DONE]")) {
		return
	}
	st.finish()
}
