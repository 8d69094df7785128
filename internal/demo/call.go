package demo

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// callTool invokes the tool a model's call names, through the platform,
// and returns the content of the "tool" message that answers it: the
// tool's result, or {"error": {code, message}} when the call failed — a
// rejected transfer or an offline browser is the model's to explain, not
// the end of the run (the tools are registered with on_failure
// "return_to_agent" for this). The user sees a state event before the call
// and one more when it has to wait. Only a cancelled run is an error.
func callTool(ctx context.Context, c *agentplane.Client, s agentplane.Stream, call toolCall) (string, error) {
	name := agentplane.ToolNameFromFunction(call.Function.Name)
	args := json.RawMessage(call.Function.Arguments)
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	if !json.Valid(args) {
		return errorContent("invalid_args", "the arguments are not JSON: "+call.Function.Arguments), nil
	}
	if name == ToolWeather && cityMissing(args) {
		// Which city? The demo agents ask the user rather than guess
		// (DESIGN §12): the run ends INPUT_REQUIRED and the answer resumes it.
		return "", &agentplane.InputRequiredError{Question: CityQuestion}
	}
	if err := s.State("calling_tool", map[string]any{"tool": name, "args": args}); err != nil {
		return "", err
	}
	onPending := agentplane.WithOnPending(func(tc agentplane.ToolCall) {
		s.State("waiting_for_tool", map[string]any{"tool": name, "tool_call_id": tc.ToolCallID, "state": tc.State, "approval_id": tc.ApprovalID})
		if tc.State == "WAITING_APPROVAL" {
			s.Delta("This needs a human's approval, so I'm waiting for a decision…\n")
		}
	})
	res, err := c.Tools().Invoke(ctx, name, args, onPending)
	if err != nil {
		if ctx.Err() != nil {
			return "", err // the run was cancelled: nobody is listening
		}
		var te *agentplane.ToolError
		if errors.As(err, &te) {
			return errorContent(te.Code, te.Message), nil
		}
		return errorContent("tool_call_failed", err.Error()), nil
	}
	if len(res) == 0 {
		res = json.RawMessage(`null`)
	}
	if strings.HasPrefix(name, "call_") {
		// Another agent's answer ({output, run_id, usage}): the model needs
		// what it said, as a planner reads a colleague's report.
		var r struct {
			Output   *string `json:"output"`
			Status   string  `json:"status"`
			Question string  `json:"question"`
		}
		if json.Unmarshal(res, &r) == nil && r.Status == "input_required" && r.Question != "" {
			// The agent asked back: this demo's agents pass the question
			// on to the user; the answer resumes this run's intention, and
			// calling that agent again in it resumes its question.
			return "", &agentplane.InputRequiredError{Question: r.Question}
		}
		if json.Unmarshal(res, &r) == nil && r.Output != nil {
			return *r.Output, nil
		}
	}
	return mcpToolMessage(res), nil
}

// mcpToolMessage is what the model is told of an MCP tool's result
// ({"content": [...], "structuredContent": {...}}): the structured content
// when there is some, else the text of its content; any other result as
// it is.
func mcpToolMessage(res json.RawMessage) string {
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(res, &r) != nil || r.Content == nil {
		return string(res)
	}
	if len(r.StructuredContent) > 0 {
		return string(r.StructuredContent)
	}
	var text []string
	for _, c := range r.Content {
		if c.Type == "text" {
			text = append(text, c.Text)
		}
	}
	return strings.Join(text, "\n")
}

func errorContent(code, message string) string {
	b, _ := json.Marshal(map[string]any{"error": map[string]string{"code": code, "message": message}})
	return string(b)
}

// CityQuestion is what the demo agents ask when the weather is wanted
// without a city.
const CityQuestion = "Which city?"

// cityMissing reports whether demo.weather's arguments name no city: none,
// or what a model passes when the message has none (the built-in model
// takes the whole message, "What's the weather?").
func cityMissing(args json.RawMessage) bool {
	var a struct {
		City string `json:"city"`
	}
	_ = json.Unmarshal(args, &a)
	c := strings.ToLower(strings.TrimSpace(a.City))
	return c == "" || strings.Contains(c, "weather") || strings.Contains(c, "?")
}

// answeredMessages folds the user's answer to the demo's city question into
// the request it answers ("Paris" → "What's the weather in Paris?"), so the
// model — the built-in one reads only the last message — calls the tool
// with it. Other messages are left as they are.
func answeredMessages(req *agentplane.Request) []agentplane.Message {
	msgs := append([]agentplane.Message(nil), req.Messages...)
	n := len(msgs)
	if req.ResumesRunID == "" || n < 2 || msgs[n-2].Role != "assistant" || msgs[n-2].Content != CityQuestion || msgs[n-1].Role != "user" {
		return msgs
	}
	city := strings.TrimRight(strings.TrimSpace(msgs[n-1].Content), ".!?")
	msgs[n-1].Content = "What's the weather in " + city + "?"
	return msgs
}
