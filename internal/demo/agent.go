// Package demo is what `serve --demo` starts: a real HTTP agent on its own
// loopback port, built with the Go SDK and registered through the normal
// API, and the tools it calls (tools.go). It routes each message by its
// words (route.go): weather questions call the server tool demo.weather,
// "time" the browser's client tool client.now, "send 250 to Bob" the server
// tool demo.transfer (approval above 100); anything else is answered
// through the platform's LLM proxy — the built-in fake upstream by default,
// a real model when AGENTPLANE_LLM_BASE_URL is set.
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

	ln, toolsLn   net.Listener
	srv, toolsSrv *http.Server
	model         string
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
	return &Agent{URL: "http://" + ln.Addr().String(), ToolsURL: "http://" + toolsLn.Addr().String(), ln: ln, toolsLn: toolsLn}, nil
}

// Serve answers invocations, calling model and the tools through the
// platform at platformURL with the agent's key, and serves the tools.
func (a *Agent) Serve(platformURL, agentKey, model string) {
	a.model = model
	h := agentplane.NewAgentHandler(a.reply)
	h.Platform = agentplane.NewClient(platformURL, agentKey)
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	a.toolsSrv = &http.Server{Handler: newToolServer(), ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(a.ln)
	go a.toolsSrv.Serve(a.toolsLn)
}

// Stop closes the demo agent and its tools.
func (a *Agent) Stop(ctx context.Context) error {
	if a.srv == nil {
		return errors.Join(a.ln.Close(), a.toolsLn.Close())
	}
	return errors.Join(a.srv.Shutdown(ctx), a.toolsSrv.Shutdown(ctx))
}

// reply routes the message to a tool, or to the model.
func (a *Agent) reply(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
	if rt := routeMessage(req.InputMessage.Content); rt.Tool != "" && req.Client() != nil {
		return callTool(ctx, req.Client(), s, rt)
	}
	return a.replyLLM(ctx, req, s)
}

const systemPrompt = "You are the agentplane demo agent. Answer briefly and kindly."

// replyLLM streams the model's answer: a state event, then each token the
// proxy relays, as a delta.
func (a *Agent) replyLLM(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
	if err := s.State("thinking", map[string]any{"model": a.model, "via": "agentplane LLM proxy"}); err != nil {
		return err
	}
	msgs := []map[string]string{{"role": "system", "content": systemPrompt}}
	for _, m := range req.Messages {
		msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content})
	}
	body, _ := json.Marshal(map[string]any{"model": a.model, "stream": true, "messages": msgs, "stream_options": map[string]bool{"include_usage": true}})
	hreq, err := http.NewRequestWithContext(ctx, "POST", req.OpenAIBaseURL()+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Authorization", "Bearer "+req.OpenAIAPIKey())
	for k, v := range req.OpenAIHeaders() {
		hreq.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(hreq)
	if err != nil {
		return &agentplane.Error{Code: "llm_unreachable", Message: err.Error()}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return &agentplane.Error{Code: "llm_error", Message: fmt.Sprintf("LLM proxy answered %d: %s", resp.StatusCode, b)}
	}
	rd := agent.NewSSEReader(resp.Body, 0)
	for {
		ev, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return &agentplane.Error{Code: "llm_error", Message: err.Error()}
		}
		if ev.Data == "[DONE]" {
			return nil
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage json.RawMessage `json:"usage"`
		}
		if json.Unmarshal([]byte(ev.Data), &chunk) != nil {
			continue
		}
		if len(chunk.Usage) > 0 && string(chunk.Usage) != "null" {
			s.SetUsage(chunk.Usage)
		}
		for _, c := range chunk.Choices {
			if err := s.Delta(c.Delta.Content); err != nil {
				return err
			}
		}
	}
}
