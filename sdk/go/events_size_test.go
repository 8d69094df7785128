package agentplane_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// TestLargeDeltaReachesThePlatform: the platform refuses any SSE event over
// 1 MiB (API.md "Limits"), so a handler that sends a long answer in one
// Delta — a non-streamed LLM answer, a file — must still end DONE with every
// byte of it, not fail agent_protocol_error. The text mixes characters JSON
// escapes (<, >, &, control characters) and multi-byte ones, which must come
// through whole wherever the SDK cuts.
func TestLargeDeltaReachesThePlatform(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		p := startPlatform(t, testdb.DSN(t, dialect))
		// 6 bytes of text that encode to 18 bytes of JSON (\u003c, \u003e, \u0001 …).
		text := strings.Repeat("<é>\x01&€", 150_000) // ~1.7 MB of text, ~2.9 MB encoded
		p.agent(t, "big", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
			return s.Delta(text)
		})
		msgs := p.run(t, "big", "go")
		end := msgs[len(msgs)-1]
		if end["type"] != "done" {
			t.Fatalf("the run ended %v, want done", end)
		}
		var got strings.Builder
		for _, m := range msgs {
			if m["type"] == "delta" {
				s, _ := m["text"].(string)
				got.WriteString(s)
			}
		}
		if got.String() != text {
			t.Fatalf("the deltas carry %d bytes, want the %d sent (equal: %v)", got.Len(), len(text), got.String() == text)
		}
	})
}

// TestLargeErrorMessageKeepsItsCode: an error whose message is over the
// platform's 1 MiB event bound (an upstream's whole answer wrapped in it)
// still fails the run with the handler's code, not agent_protocol_error.
func TestLargeErrorMessageKeepsItsCode(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	p.agent(t, "loud", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		return &agentplane.Error{Code: "upstream_failed", Message: strings.Repeat("<html>", 300_000)}
	})
	msgs := p.run(t, "loud", "go")
	if end := msgs[len(msgs)-1]; end["type"] != "error" || end["code"] != "upstream_failed" {
		t.Fatalf("the run ended %v, want error upstream_failed", end)
	}
}

// TestOversizeStateIsRefused: a state event the platform would refuse (over
// 1 MiB) is not sent — it would fail the run — and State says why.
func TestOversizeStateIsRefused(t *testing.T) {
	var stateErr error
	srv := startAgent(t, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		stateErr = s.State("dump", map[string]string{"blob": strings.Repeat("x", 2<<20)})
		return nil
	})
	evs := invokeEvents(t, srv, nil)
	if stateErr == nil || !errors.Is(stateErr, agentplane.ErrEventTooLarge) {
		t.Fatalf("State = %v, want ErrEventTooLarge", stateErr)
	}
	if len(evs) != 1 || evs[0].Name != "done" {
		t.Fatalf("events %v, want only done", evs)
	}
}
