package agentplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// keptAlive is what the caller saw of its raw child stream.
type keptAlive struct {
	raw    string
	maxGap time.Duration
	gapEnd int // len(raw) when the longest gap ended
	err    error
}

// TestInvokeAgentStreamKeepAliveBusySession: A calls B and B calls C, which
// streams a delta about every second for longer than the 15 s keep-alive
// interval. B itself writes nothing meanwhile; C's events land in the same
// session, so they wake the platform's stream of B to A (streamChild in
// internal/httpapi/invoke.go) and are skipped there. docs/API.md promises
// the quiet child `: keep-alive` comments every 15 s: A's stream of B must
// get a byte at least that often, however busy the session. Without that,
// C's deltas kept putting the keep-alive off and A's stream stayed silent
// for as long as C streamed — long enough, in real use, for the SDK's
// AgentReadTimeout to take it for dead, again and again, and fail A.
//
// A's handler sends the invoke itself, as InvokeAgent does (agents.go), to
// read the raw bytes: AgentStream hides the comments. SQLite only: the
// stream is served from the log's subscription whatever the store, and the
// test takes about 30 s.
func TestInvokeAgentStreamKeepAliveBusySession(t *testing.T) {
	const (
		deltas = 28
		// The keep-alive is due 15 s after the last byte; the rest is
		// slack for a loaded machine (CI runs packages side by side on
		// two CPUs). Without the fix the gap is the whole of C's ~28 s.
		maxGap = 21 * time.Second
	)
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	p.agent(t, "c", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		for i := range deltas {
			if err := s.Delta(fmt.Sprintf("%d ", i)); err != nil {
				return err
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Second):
			}
		}
		return nil
	})
	p.agent(t, "b", []string{"c"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		call, err := req.Client().Agents().Invoke(ctx, "c", "count")
		if err != nil {
			return err
		}
		defer call.Close()
		text, err := call.Text()
		if err != nil {
			return err
		}
		return s.Delta("c said: " + text)
	})
	got := make(chan keptAlive, 1)
	p.agent(t, "a", []string{"b"}, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		k := readChildStream(ctx, req.Client(), "b", "go")
		got <- k
		return k.err
	})

	msgs := p.run(t, "a", "go")
	k := <-got
	if k.err != nil {
		t.Fatalf("A's stream of B: %v\nraw so far:\n%s", k.err, k.raw)
	}
	t.Logf("longest silence of A's stream of B: %v", k.maxGap.Round(time.Millisecond))
	if k.maxGap > maxGap {
		t.Fatalf("A's stream of B was silent for %v (over %v) before byte %d while C streamed; raw:\n%s",
			k.maxGap.Round(time.Millisecond), maxGap, k.gapEnd, k.raw)
	}
	if !strings.Contains(k.raw, ": keep-alive\n") || !strings.Contains(k.raw, "event: done\n") || !strings.Contains(k.raw, "c said: 0 1 ") {
		t.Fatalf("A's stream of B lacks a keep-alive, B's delta or its done:\n%s", k.raw)
	}
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("A ended %v", end)
	}
}

// readChildStream invokes agentID as a child of c's run with Accept:
// text/event-stream, the headers and body agents.go sends, and reads the
// answer's raw bytes to its end, timing the longest wait between two reads
// (from the response's headers on).
func readChildStream(ctx context.Context, c *agentplane.Client, agentID, message string) keptAlive {
	var k keptAlive
	body, _ := json.Marshal(map[string]any{
		"message":         map[string]any{"role": "user", "content": message},
		"idempotency_key": "keepalive-" + c.RunID,
	})
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(c.BaseURL, "/")+"/v1/agents/"+agentID+":invoke", bytes.NewReader(body))
	if err != nil {
		k.err = err
		return k
	}
	hr.Header.Set("Accept", "text/event-stream")
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Authorization", "Bearer "+c.APIKey)
	hr.Header.Set("x-run-id", c.RunID)
	hr.Header.Set("x-session-id", c.SessionID)
	resp, err := http.DefaultClient.Do(hr)
	if err != nil {
		k.err = err
		return k
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		raw, _ := io.ReadAll(resp.Body)
		k.err = fmt.Errorf("status %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), raw)
		return k
	}
	var raw strings.Builder
	buf := make([]byte, 4096)
	last := time.Now()
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			now := time.Now()
			if gap := now.Sub(last); gap > k.maxGap {
				k.maxGap, k.gapEnd = gap, raw.Len()
			}
			last = now
			raw.Write(buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			k.err = err
			break
		}
	}
	k.raw = raw.String()
	return k
}
