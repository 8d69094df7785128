package fakellm

import (
	"encoding/json"
	"net/http"
)

type responsesRequest struct {
	Model        string          `json:"model"`
	Input        json.RawMessage `json:"input"`
	Instructions *string         `json:"instructions"`
	Stream       bool            `json:"stream"`
	Tools        []struct {
		Type        string          `json:"type"`
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"tools"`
	ToolChoice json.RawMessage `json:"tool_choice"`
}

// functions are the function tools the request offers.
func (r *responsesRequest) functions() []toolSpec {
	var out []toolSpec
	for _, t := range r.Tools {
		if t.Type == "function" && t.Name != "" {
			out = append(out, toolSpec{Name: t.Name, Description: t.Description, Parameters: t.Parameters})
		}
	}
	return out
}

type respUsage struct {
	InputTokens        int `json:"input_tokens"`
	InputTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"input_tokens_details"`
	OutputTokens        int `json:"output_tokens"`
	OutputTokensDetails struct {
		ReasoningTokens int `json:"reasoning_tokens"`
	} `json:"output_tokens_details"`
	TotalTokens int `json:"total_tokens"`
}

type respContent struct {
	Type        string `json:"type"`
	Annotations []any  `json:"annotations"`
	Logprobs    []any  `json:"logprobs"`
	Text        string `json:"text"`
}

type respItem struct {
	ID      string        `json:"id"`
	Type    string        `json:"type"`
	Status  string        `json:"status"`
	Content []respContent `json:"content,omitempty"`
	Role    string        `json:"role,omitempty"`
	// function_call items
	Arguments *string `json:"arguments,omitempty"`
	CallID    string  `json:"call_id,omitempty"`
	Name      string  `json:"name,omitempty"`
}

type respObject struct {
	ID                 string     `json:"id"`
	Object             string     `json:"object"`
	CreatedAt          int64      `json:"created_at"`
	Status             string     `json:"status"`
	Background         bool       `json:"background"`
	Error              any        `json:"error"`
	IncompleteDetails  any        `json:"incomplete_details"`
	Instructions       *string    `json:"instructions"`
	MaxOutputTokens    any        `json:"max_output_tokens"`
	Model              string     `json:"model"`
	Output             []respItem `json:"output"`
	ParallelToolCalls  bool       `json:"parallel_tool_calls"`
	PreviousResponseID any        `json:"previous_response_id"`
	Store              bool       `json:"store"`
	Temperature        float64    `json:"temperature"`
	Text               any        `json:"text"`
	ToolChoice         string     `json:"tool_choice"`
	Tools              []any      `json:"tools"`
	TopP               float64    `json:"top_p"`
	Truncation         string     `json:"truncation"`
	Usage              *respUsage `json:"usage"`
	User               any        `json:"user"`
	Metadata           struct{}   `json:"metadata"`
}

// planResponses reads the input: a string, or a list of items (messages
// with string or part-list content, and function_call_output items).
func planResponses(req *responsesRequest) chatPlan {
	var r round
	r.userTurn("")
	names := map[string]string{} // call id → function name
	promptWords := 0
	if req.Instructions != nil {
		promptWords += words(*req.Instructions)
	}
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		r.userTurn(s)
		promptWords += words(s)
	} else {
		var items []struct {
			Type    string          `json:"type"`
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
			Output  json.RawMessage `json:"output"`
			CallID  string          `json:"call_id"`
			Name    string          `json:"name"`
		}
		_ = json.Unmarshal(req.Input, &items)
		for _, it := range items {
			switch {
			case it.Type == "function_call_output":
				out := contentText(it.Output)
				r.results = append(r.results, toolResult{name: names[it.CallID], output: out})
				r.endsWithTool = true
				promptWords += words(out)
			case it.Type == "function_call":
				r.called[it.Name] = true
				names[it.CallID] = it.Name
				r.endsWithTool = false
			case it.Role != "":
				t := contentText(it.Content)
				promptWords += words(t)
				if it.Role == "user" {
					r.userTurn(t)
				}
				r.endsWithTool = false
			}
		}
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

func (ex *exchange) responses() {
	var req responsesRequest
	if err := json.Unmarshal(ex.body, &req); err != nil {
		ex.error(http.StatusBadRequest, "invalid_request_error", "invalid_json", "We could not parse the JSON body of your request.")
		return
	}
	if req.Model == "" {
		ex.error(http.StatusBadRequest, "invalid_request_error", "missing_required_parameter", "Missing required parameter: 'model'.")
		return
	}
	plan := planResponses(&req)
	n := itoa(ex.s.seq.Add(1))
	obj := respObject{
		ID: "resp_fake" + n, Object: "response", CreatedAt: ex.s.opts.Created, Status: "completed",
		Instructions: req.Instructions, Model: req.Model, Output: []respItem{}, ParallelToolCalls: true, Store: true,
		Temperature: 1, Text: map[string]any{"format": map[string]string{"type": "text"}}, ToolChoice: "auto",
		Tools: []any{}, TopP: 1, Truncation: "disabled",
	}
	var item respItem
	if plan.toolName != "" {
		args := plan.toolArgs
		item = respItem{ID: "fc_fake" + n, Type: "function_call", Status: "completed", Arguments: &args,
			CallID: "call_fake" + n, Name: plan.toolName}
	} else {
		item = respItem{ID: "msg_fake" + n, Type: "message", Status: "completed", Role: "assistant",
			Content: []respContent{{Type: "output_text", Annotations: []any{}, Logprobs: []any{}, Text: plan.text}}}
	}
	u := &respUsage{InputTokens: plan.usage.Prompt, OutputTokens: plan.usage.Completion, TotalTokens: plan.usage.Total()}
	u.InputTokensDetails.CachedTokens = plan.usage.Cached
	u.OutputTokensDetails.ReasoningTokens = plan.usage.Reasoning

	if !req.Stream {
		obj.Output = []respItem{item}
		obj.Usage = u
		ex.writeJSON(http.StatusOK, obj)
		return
	}

	st := ex.startStream()
	if st == nil {
		return
	}
	seq := 0
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		return st.json(typ, fields)
	}
	obj.Status = "in_progress"
	if !send("response.created", map[string]any{"response": obj}) ||
		!send("response.in_progress", map[string]any{"response": obj}) {
		return
	}
	pending := item
	pending.Status = "in_progress"
	if plan.toolName != "" {
		empty := ""
		pending.Arguments = &empty
		if !send("response.output_item.added", map[string]any{"output_index": 0, "item": pending}) {
			return
		}
		for _, a := range argPieces(plan.toolArgs) {
			if !send("response.function_call_arguments.delta", map[string]any{"item_id": item.ID, "output_index": 0, "delta": a}) {
				return
			}
		}
		if !send("response.function_call_arguments.done", map[string]any{"item_id": item.ID, "output_index": 0, "arguments": plan.toolArgs}) {
			return
		}
	} else {
		pending.Content = []respContent{}
		part := respContent{Type: "output_text", Annotations: []any{}, Logprobs: []any{}, Text: ""}
		if !send("response.output_item.added", map[string]any{"output_index": 0, "item": pending}) ||
			!send("response.content_part.added", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "part": part}) {
			return
		}
		for _, piece := range Pieces(plan.text) {
			if !send("response.output_text.delta", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "delta": piece, "logprobs": []any{}}) {
				return
			}
		}
		part.Text = plan.text
		if !send("response.output_text.done", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "text": plan.text, "logprobs": []any{}}) ||
			!send("response.content_part.done", map[string]any{"item_id": item.ID, "output_index": 0, "content_index": 0, "part": part}) {
			return
		}
	}
	if !send("response.output_item.done", map[string]any{"output_index": 0, "item": item}) {
		return
	}
	obj.Status = "completed"
	obj.Output = []respItem{item}
	obj.Usage = u
	if !send("response.completed", map[string]any{"response": obj}) {
		return
	}
	st.finish()
}
