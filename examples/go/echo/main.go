// Command echo is the echo agent of examples/python/echo_agent.py, written
// with the Go SDK: it registers itself with the platform (when
// AGENTPLANE_ADMIN_KEY is set), and for each message sends a "thinking"
// state, reads the session's transcript through the platform, and streams a
// greeting plus the user's words back one word every ~50 ms.
//
//	AGENTPLANE_URL=http://127.0.0.1:8080 AGENTPLANE_ADMIN_KEY=... go run ./examples/go/echo
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

const (
	wordDelay      = 50 * time.Millisecond // so the streaming is visible
	heartbeatEvery = 30 * time.Second
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "echo:", err)
		os.Exit(1)
	}
}

func run() error {
	host := flag.String("host", "127.0.0.1", "address to listen on")
	port := flag.Int("port", 9004, "port to listen on (0 picks a free one)")
	agentID := flag.String("agent-id", "echo", "agent id to register")
	name := flag.String("name", "Echo agent (Go)", "display name to register")
	endpoint := flag.String("endpoint", "", "URL the platform calls (default http://HOST:PORT)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	platformURL := os.Getenv(agentplane.EnvURL)
	if platformURL == "" {
		platformURL = "http://127.0.0.1:8080"
	}
	// Listen first: with -port 0 the endpoint to register is only known now.
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, fmt.Sprint(*port)))
	if err != nil {
		return err
	}
	if *endpoint == "" {
		*endpoint = "http://" + ln.Addr().String()
	}

	agentKey := os.Getenv(agentplane.EnvAgentKey)
	if adminKey := os.Getenv("AGENTPLANE_ADMIN_KEY"); adminKey != "" {
		res, err := agentplane.Register(ctx, platformURL, adminKey, agentplane.RegisterParams{
			AgentID: *agentID, Name: *name, Endpoint: *endpoint, Capabilities: []string{"chat"},
			// Without a saved agent key, rotate: the platform shows a key
			// only on first registration or rotation.
			RotateKey: agentKey == "",
		})
		if err != nil {
			return fmt.Errorf("register: %w", err)
		}
		if res.AgentAPIKey != "" {
			agentKey = res.AgentAPIKey
		}
		slog.Info("registered", "agent_id", *agentID, "endpoint", *endpoint, "platform", platformURL)
	}
	if agentKey == "" {
		return errors.New("no agent key: set AGENTPLANE_ADMIN_KEY (to register) or " + agentplane.EnvAgentKey)
	}

	platform := agentplane.NewClient(platformURL, agentKey)
	platform.AgentID = *agentID
	go heartbeat(ctx, platform)

	h := agentplane.NewAgentHandler(handle)
	h.Platform = platform
	slog.Info("echo agent listening", "url", "http://"+ln.Addr().String())
	return agentplane.ServeListener(ctx, ln, h)
}

// handle echoes the input back word by word, after saying how long the
// session is.
func handle(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
	if err := s.State("thinking", map[string]string{"step": "reading the transcript"}); err != nil {
		return err
	}
	count := -1
	if c := req.Client(); c != nil {
		msgs, err := c.Transcript(ctx, "")
		if err != nil {
			// The echo still works without the transcript; say why it is missing.
			slog.WarnContext(ctx, "transcript unavailable", "run_id", req.RunID, "session_id", req.SessionID, "err", err)
		} else {
			count = len(msgs)
		}
	}

	text := strings.TrimSpace(req.InputMessage.Content)
	if text == "" {
		text = "(nothing)"
	}
	reply := "Hello! You said: " + text
	if req.UserID != "" {
		reply = "Hello " + req.UserID + "! You said: " + text
	}
	if count >= 0 {
		plural := "s"
		if count == 1 {
			plural = ""
		}
		reply += fmt.Sprintf(" (this session has %d message%s so far)", count, plural)
	}

	words := strings.Split(reply, " ")
	for i, w := range words {
		if i > 0 {
			w = " " + w
			// The delay ends early when the run is cancelled.
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wordDelay):
			}
		}
		if err := s.Delta(w); err != nil {
			return err
		}
	}
	s.SetUsage(map[string]int{"words": len(words)})
	return nil
}

func heartbeat(ctx context.Context, c *agentplane.Client) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Heartbeat(ctx, ""); err != nil && ctx.Err() == nil {
				slog.Warn("heartbeat failed", "err", err)
			}
		}
	}
}
