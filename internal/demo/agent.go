// Package demo is what `serve --demo` starts: a real HTTP agent on its own
// loopback port, built with the Go SDK and registered through the normal
// API, that streams a reply without any LLM.
package demo

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// AgentID is the demo agent's id.
const AgentID = "demo"

// Agent is the running demo agent.
type Agent struct {
	URL string
	srv *http.Server
}

// WordDelay paces the streamed words so the stream is visible in a browser.
var WordDelay = 60 * time.Millisecond

// StartAgent serves the demo agent on 127.0.0.1 at a free port.
func StartAgent() (*Agent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("demo agent: %w", err)
	}
	srv := &http.Server{Handler: agentplane.NewAgentHandler(reply), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return &Agent{URL: "http://" + ln.Addr().String(), srv: srv}, nil
}

// Stop closes the demo agent.
func (a *Agent) Stop(ctx context.Context) error { return a.srv.Shutdown(ctx) }

// reply streams an answer word by word: a state event, then the words.
func reply(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
	if err := s.State("thinking", map[string]any{"note": "the demo agent has no LLM; it echoes"}); err != nil {
		return err
	}
	turns := 0
	for _, m := range req.Messages {
		if m.Role == "user" {
			turns++
		}
	}
	text := fmt.Sprintf("Hello! You said: %q. I am the agentplane demo agent, streaming this reply word by word through the platform; every word is a durable event you can replay. This session has %d user message(s) so far.",
		req.InputMessage.Content, turns)
	words := strings.SplitAfter(text, " ")
	for _, w := range words {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(WordDelay):
		}
		if err := s.Delta(w); err != nil {
			return err
		}
	}
	s.SetUsage(map[string]int{"words": len(words)})
	return nil
}
