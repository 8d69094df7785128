// Package demo is what `serve --demo` starts: a real HTTP agent on its own
// loopback port, built with the Go SDK and registered through the normal
// API. It answers through the platform's LLM proxy — the built-in fake
// upstream by default, a real model when AGENTPLANE_LLM_BASE_URL is set.
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

// Agent is the demo agent: Listen, register it, then Serve.
type Agent struct {
	URL   string
	ln    net.Listener
	srv   *http.Server
	model string
}

// Listen reserves the demo agent's loopback port, so its endpoint is known
// before it is registered.
func Listen() (*Agent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	return &Agent{URL: "http://" + ln.Addr().String(), ln: ln}, nil
}

// Serve answers invocations, calling model through the platform at
// platformURL with the agent's key.
func (a *Agent) Serve(platformURL, agentKey, model string) {
	a.model = model
	h := agentplane.NewAgentHandler(a.reply)
	h.Platform = agentplane.NewClient(platformURL, agentKey)
	a.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(a.ln)
}

// Stop closes the demo agent.
func (a *Agent) Stop(ctx context.Context) error {
	if a.srv == nil {
		return a.ln.Close()
	}
	return a.srv.Shutdown(ctx)
}

const systemPrompt = "You are the agentplane demo agent. Answer briefly and kindly."

// reply streams the model's answer: a state event, then each token the
// proxy relays, as a delta.
func (a *Agent) reply(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
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
