package run

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// StartParams.BeforeInvoke runs before the agent is invoked, and the agent
// is not invoked until it returns (the A2A server records its hold of the
// session there, while the start commits).
func TestBeforeInvokeHoldsTheAgentBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		var invoked atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			invoked.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: done\ndata: {}\n\n")
		}))
		t.Cleanup(srv.Close)
		m := newTestManager(t, st, Options{}, "a", srv.URL)
		entered, release := make(chan int32, 1), make(chan struct{})
		started, err := m.StartRun(context.Background(), StartParams{UserID: "u", AgentID: "a", Message: agent.Message{Role: "user", Content: "hi"},
			BeforeInvoke: func(ctx context.Context) {
				if ctx.Err() != nil {
					t.Errorf("BeforeInvoke got a done context: %v", ctx.Err())
				}
				entered <- invoked.Load()
				<-release
			}})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case n := <-entered:
			if n != 0 {
				t.Fatalf("the agent was invoked %d times before BeforeInvoke", n)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("BeforeInvoke was never called")
		}
		time.Sleep(50 * time.Millisecond) // room for a wrong implementation to invoke meanwhile
		if n := invoked.Load(); n != 0 {
			t.Fatalf("the agent was invoked while BeforeInvoke held it back")
		}
		close(release)
		if r := waitEnded(t, st, started.Run.RunID); r.Status != store.RunDone || invoked.Load() != 1 {
			t.Fatalf("run %s, agent invoked %d times", r.Status, invoked.Load())
		}
	})
}
