package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/agent"
)

// relayMain is the latency baseline: the shortest honest path from an
// agent's SSE stream to a client's WebSocket. It speaks the same client
// protocol subset as the platform (hello → ready, agent_invoke → deltas,
// done), calls the agent with the platform's own client and SSE reader
// (internal/agent) and writes with the same WebSocket library and upgrader
// settings — but persists nothing, allocates no seq, runs no state machine:
// each delta is written to the socket as soon as it is parsed. The ratio
// platform ÷ relay is therefore the cost of durability and the platform.
func relayMain(args []string) error {
	fs := flag.NewFlagSet("relay", flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	agentURL := fs.String("agent", "", "agent endpoint (POST {agent}/invoke)")
	fs.Parse(args)
	if *agentURL == "" {
		return fmt.Errorf("relay: -agent is required")
	}
	allow, err := agent.ParseAllowlist("127.0.0.1/32")
	if err != nil {
		return err
	}
	client := &agent.Client{HTTP: agent.NewHTTPClient(allow)}
	up := websocket.Upgrader{WriteBufferPool: &sync.Pool{}, CheckOrigin: func(*http.Request) bool { return true }}
	var nextSession sync.Mutex
	sessions := 0

	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var wmu sync.Mutex
		write := func(v any) bool {
			b, _ := json.Marshal(v)
			wmu.Lock()
			defer wmu.Unlock()
			ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
			return ws.WriteMessage(websocket.TextMessage, b) == nil
		}
		for {
			var m struct {
				Type string `json:"type"`
			}
			if err := ws.ReadJSON(&m); err != nil {
				return
			}
			switch m.Type {
			case "hello":
				write(map[string]any{"type": "ready", "user_id": userID})
			case "agent_invoke":
				nextSession.Lock()
				sessions++
				sid := fmt.Sprintf("relay-%d", sessions)
				nextSession.Unlock()
				go func() {
					seq := int64(0)
					_, err := client.Invoke(ctx, *agentURL, agent.InvokeRequest{AgentID: agentID, SessionID: sid, RunID: sid, UserID: userID,
						InputMessage: agent.Message{Role: "user", Content: "go"}}, func(ev agent.StreamEvent) error {
						if ev.Type != "delta" {
							return nil
						}
						seq++
						if !write(map[string]any{"type": "delta", "session_id": sid, "seq": seq, "text": ev.Text}) {
							return fmt.Errorf("client gone")
						}
						return nil
					})
					if err != nil {
						write(map[string]any{"type": "error", "session_id": sid, "seq": seq + 1, "code": "agent_error", "message": err.Error()})
						return
					}
					write(map[string]any{"type": "done", "session_id": sid, "seq": seq + 1})
				}()
			}
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Printf("relay listening on http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); err != http.ErrServerClosed {
		return err
	}
	return nil
}
