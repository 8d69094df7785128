// Package demo is what `serve --demo` starts: a real HTTP agent on its own
// loopback port, built with the Go SDK and registered through the normal
// API, and the tools it calls (tools.go), one MCP server's among them
// (mcp.go). Every message goes to a model
// through the platform's LLM proxy with the run's tools offered for
// function calling — the built-in fake upstream by default (which picks a
// tool by the words of the message: see internal/fakellm), a real model
// when AGENTPLANE_LLM_BASE_URL is set. The tool the model picks is invoked
// through the platform's tool API: the server tool demo.weather, the
// browser's client tool client.now, the server tool demo.transfer, which
// asks a human for approval above 100, or the MCP tools
// demo_mcp@lookup_order and demo_mcp@refund (every refund needs an approval).
// team.go adds a planner that calls two worker agents the same way (issue 9).
// Asked for the weather without a city, the agents ask back "Which city?"
// (input required, issue 10) and the answer resumes the intention; a
// worker's question reaches the user through the planner the same way.
// a2a.go is a remote A2A agent (a currency converter) linked to the planner.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// AgentID is the demo agent's id.
const AgentID = "demo"

// Agent is the demo agent and its tool listener: Listen, register the agent
// (at URL) and the tools (RegisterTools with ToolsURL), then Serve.
type Agent struct {
	// URL is the agent's endpoint.
	URL string
	// ToolsURL is the base URL of the demo's server tools
	// (POST {ToolsURL}/weather, POST {ToolsURL}/transfer).
	ToolsURL string
	// MCPURL is the demo's MCP server (mcp.go), to register with
	// RegisterMCPServer.
	MCPURL string

	ln, toolsLn, mcpLn    net.Listener
	srv, toolsSrv, mcpSrv *http.Server
	model                 string
	// prompt is the system prompt of the agent's model; "" is the demo
	// agent's (the team's agents have their own, team.go).
	prompt string
}

// Listen reserves the loopback ports of the demo agent and of its tools, so
// their URLs are known before they are registered.
func Listen() (*Agent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	toolsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("demo tools: %w", err)
	}
	mcpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		toolsLn.Close()
		return nil, fmt.Errorf("demo MCP server: %w", err)
	}
	// The MCP server serves at once: the platform connects to it as soon
	// as it is registered, before the agent is served.
	mcpSrv := &http.Server{Handler: newMCPServer(), ReadHeaderTimeout: 10 * time.Second}
	go mcpSrv.Serve(mcpLn)
	return &Agent{URL: "http://" + ln.Addr().String(), ToolsURL: "http://" + toolsLn.Addr().String(), MCPURL: "http://" + mcpLn.Addr().String() + "/mcp",
		ln: ln, toolsLn: toolsLn, mcpLn: mcpLn, mcpSrv: mcpSrv}, nil
}

// Serve answers invocations, calling model and the tools through the
// platform at platformURL with the agent's key, and serves the tools.
func (a *Agent) Serve(platformURL, agentKey, model string) {
	a.model = model
	h := agentplane.NewAgentHandler(a.reply)
	h.Platform = agentplane.NewClient(platformURL, agentKey)
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(a.ln)
	if a.toolsLn != nil {
		a.toolsSrv = &http.Server{Handler: newToolServer(), ReadHeaderTimeout: 10 * time.Second}
		go a.toolsSrv.Serve(a.toolsLn)
	}
}

// Stop closes the demo agent and its tools.
func (a *Agent) Stop(ctx context.Context) error {
	var errs []error
	if a.srv == nil {
		errs = append(errs, a.ln.Close())
	} else {
		errs = append(errs, a.srv.Shutdown(ctx))
	}
	if a.toolsSrv != nil {
		errs = append(errs, a.toolsSrv.Shutdown(ctx))
	} else if a.toolsLn != nil {
		errs = append(errs, a.toolsLn.Close())
	}
	if a.mcpSrv != nil {
		// The MCP server's stream to the platform stays open: close, not shut down.
		errs = append(errs, a.mcpSrv.Close())
	}
	return errors.Join(errs...)
}

// reply answers one message with the OpenAI function-calling loop, every
// step through the platform: the run's tools (GET /v1/tools?run_id=) are
// offered to the model through the LLM proxy; each call the model makes is
// invoked through the tool API (waiting through approvals and the
// browser's client tools) and its result sent back as a "tool" message;
// the model's final answer is streamed to the user as it comes.
func (a *Agent) reply(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
	c := req.Client()
	if c == nil {
		return &agentplane.Error{Code: "not_configured", Message: "the demo agent has no platform client"}
	}
	tools, err := c.Tools().List(ctx)
	if err != nil {
		return &agentplane.Error{Code: "tools_unavailable", Message: err.Error()}
	}
	prompt := a.prompt
	if prompt == "" {
		prompt = systemPrompt
	}
	msgs := []chatMessage{{Role: "system", Content: ptr(prompt)}}
	for _, m := range answeredMessages(req) {
		msgs = append(msgs, chatMessage{Role: m.Role, Content: ptr(m.Content)})
	}
	var usage usageTotal
	defer func() { s.SetUsage(usage.value()) }()
	for round := 0; ; round++ {
		offered := tools
		if round == maxToolRounds {
			offered = nil // enough tools: the model must answer now
		}
		if err := s.State("thinking", map[string]any{"model": a.model, "via": "agentplane LLM proxy"}); err != nil {
			return err
		}
		answer, err := a.complete(ctx, req, msgs, offered, s, &usage)
		if err != nil {
			return err
		}
		if len(answer.ToolCalls) == 0 {
			return nil
		}
		msgs = append(msgs, answer)
		for _, call := range answer.ToolCalls {
			out, err := callTool(ctx, c, s, call)
			if err != nil {
				return err
			}
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: call.ID, Content: ptr(out)})
		}
	}
}

// maxToolRounds bounds the tool calls of one answer: a model that keeps
// calling tools is asked for its answer without them.
const maxToolRounds = 4

const systemPrompt = "You are the agentplane demo agent. Answer briefly and kindly. Use the tools you are given for weather, the user's time, money transfers, and looking up or refunding orders."

// chatMessage is a Chat Completions message as sent and as rebuilt from a
// stream.
type chatMessage struct {
	Role       string     `json:"role"`
	Content    *string    `json:"content"`
	ToolCalls  []toolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func ptr(s string) *string { return &s }

// complete streams one chat completion: its text goes to the user as
// deltas as it arrives, its tool calls are assembled from their fragments.
// It returns the assistant message.
func (a *Agent) complete(ctx context.Context, req *agentplane.Request, msgs []chatMessage, tools []agentplane.FunctionTool, s agentplane.Stream, usage *usageTotal) (chatMessage, error) {
	answer := chatMessage{Role: "assistant"}
	body := map[string]any{"model": a.model, "stream": true, "messages": msgs, "stream_options": map[string]bool{"include_usage": true}}
	if len(tools) > 0 {
		body["tools"] = tools
	}
	b, err := json.Marshal(body)
	if err != nil {
		return answer, err
	}
	hreq, err := http.NewRequestWithContext(ctx, "POST", req.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(b))
	if err != nil {
		return answer, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+req.OpenAIAPIKey())
	for k, v := range req.OpenAIHeaders() {
		hreq.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return answer, &agentplane.Error{Code: "llm_unreachable", Message: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return answer, &agentplane.Error{Code: "llm_error", Message: fmt.Sprintf("LLM proxy answered %d: %s", resp.StatusCode, b)}
	}
	var text strings.Builder
	rd := agent.NewSSEReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) || (err == nil && ev.Data == "[DONE]") {
			break
		}
		if err != nil {
			return answer, &agentplane.Error{Code: "llm_error", Message: err.Error()}
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Type     string `json:"type"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *chunkUsage `json:"usage"`
		}
		if json.Unmarshal([]byte(ev.Data), &chunk) != nil {
			continue
		}
		if chunk.Usage != nil {
			usage.add(chunk.Usage)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" {
				text.WriteString(c.Delta.Content)
				if err := s.Delta(c.Delta.Content); err != nil {
					return answer, err
				}
			}
			for _, f := range c.Delta.ToolCalls {
				for len(answer.ToolCalls) <= f.Index {
					answer.ToolCalls = append(answer.ToolCalls, toolCall{Type: "function"})
				}
				tc := &answer.ToolCalls[f.Index]
				if f.ID != "" {
					tc.ID = f.ID
				}
				if f.Type != "" {
					tc.Type = f.Type
				}
				tc.Function.Name += f.Function.Name
				tc.Function.Arguments += f.Function.Arguments
			}
		}
	}
	if text.Len() > 0 || len(answer.ToolCalls) == 0 {
		answer.Content = ptr(text.String())
	}
	return answer, nil
}

// chunkUsage is the usage object of the stream's last chunk.
type chunkUsage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// usageTotal adds up the usage of an answer's model calls for done.usage.
type usageTotal struct {
	calls                                 int
	promptTokens, completionTokens, total int64
}

func (u *usageTotal) add(c *chunkUsage) {
	u.calls++
	u.promptTokens += c.PromptTokens
	u.completionTokens += c.CompletionTokens
	u.total += c.TotalTokens
}

func (u *usageTotal) value() any {
	if u.calls == 0 {
		return nil
	}
	return map[string]any{"llm_calls": u.calls, "prompt_tokens": u.promptTokens, "completion_tokens": u.completionTokens, "total_tokens": u.total}
}
