package run

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// holdingAgent is a real HTTP agent whose stream stays open until the test
// ends, so a run it serves stays active.
func holdingAgent(t *testing.T) string {
	t.Helper()
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case <-done:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { close(done); srv.Close() })
	return srv.URL
}

// agent_invokes racing to create one new session through two processes:
// one starts the run, every other gets session_busy — never an internal
// error from the duplicate session key (issue 8, item 3).
func TestStartRacingNewSessionAcrossProcesses(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st1, st2 := openTwice(t, dialect)
		ctx := context.Background()
		allow, _ := agent.ParseAllowlist("127.0.0.1/32")
		inv := &agent.Client{HTTP: agent.NewHTTPClient(allow)}
		if _, err := st1.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: "a1", Name: "A", Endpoint: holdingAgent(t), KeyHash: "kh", At: 1}); err != nil {
			t.Fatal(err)
		}
		var ms []*Manager
		for i, st := range []store.Store{st1, st2} {
			m := manager(t, st, []string{"r1", "r2"}[i], inv)
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			ms = append(ms, m)
		}
		defer func() {
			sctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			defer cancel()
			for _, m := range ms {
				m.Shutdown(sctx)
			}
		}()
		const rounds, perManager = 15, 3
		for round := range rounds {
			sid := ids.New("ses")
			start := make(chan struct{})
			var wg sync.WaitGroup
			errs := make(chan error, 2*perManager)
			for _, m := range ms {
				for range perManager {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						_, err := m.StartRun(ctx, StartParams{UserID: "alice", SessionID: sid, AgentID: "a1", Message: agent.Message{Role: "user", Content: "hi"}})
						errs <- err
					}()
				}
			}
			close(start)
			wg.Wait()
			close(errs)
			started := 0
			for err := range errs {
				switch {
				case err == nil:
					started++
				case !errors.Is(err, ErrSessionBusy):
					t.Fatalf("round %d: a racing agent_invoke got %v, want session_busy", round, err)
				}
			}
			if started != 1 {
				t.Fatalf("round %d: %d runs started in one new session, want 1", round, started)
			}
		}
	})
}
