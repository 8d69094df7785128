package ingress

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// presenceRecorder writes presence to a real store as instance "i1" and
// remembers every write per session, in order.
type presenceRecorder struct {
	st store.Store

	mu     sync.Mutex
	writes map[string][]int
	hold   chan struct{} // when set, writes of 1 wait for it to close
}

func (r *presenceRecorder) write(ctx context.Context, sessionID string, n int) error {
	r.mu.Lock()
	hold := r.hold
	r.mu.Unlock()
	if hold != nil && n > 0 {
		select {
		case <-hold:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if err := r.st.SessionClientsSet(ctx, sessionID, "i1", n, time.Now().UnixMilli()); err != nil {
		return err
	}
	r.mu.Lock()
	r.writes[sessionID] = append(r.writes[sessionID], n)
	r.mu.Unlock()
	return nil
}

func (r *presenceRecorder) of(sessionID string) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.writes[sessionID])
}

// online asks the store as another process would.
func (r *presenceRecorder) online(t *testing.T, sessionID string) bool {
	t.Helper()
	ok, err := r.st.SessionHasClient(context.Background(), sessionID, 0)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func newPresenceServer(t *testing.T) (*Server, string, *presenceRecorder) {
	t.Helper()
	st := testdb.Open(t, "sqlite")
	if err := st.InstanceHeartbeat(context.Background(), "i1", time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	log := eventlog.New(st, eventlog.Options{})
	t.Cleanup(log.Stop)
	runs := run.New(log, run.Options{InstanceID: "i1", Invoker: &agent.Client{}})
	rec := &presenceRecorder{st: st, writes: map[string][]int{}}
	srv := New(auth.New("admin-key-0123456789", map[string]string{"u": "k"}, st), runs, log, Options{Presence: rec.write})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, "ws" + strings.TrimPrefix(hs.URL, "http"), rec
}

func newUserSession(t *testing.T, st store.Store) string {
	t.Helper()
	id := ids.New("ses")
	if _, err := st.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: id, UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}

// eventually polls cond for up to five seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func subscribe(t *testing.T, c *websocket.Conn, sessionID string) {
	t.Helper()
	if err := c.WriteJSON(map[string]any{"type": "subscribe", "session_id": sessionID, "after_seq": 0}); err != nil {
		t.Fatal(err)
	}
}

// A session's connections are written through to the store when the first
// arrives and when the last leaves, and only then, so other processes see
// the client (DESIGN §8).
func TestPresenceWrittenThrough(t *testing.T) {
	srv, url, rec := newPresenceServer(t)
	ses := newUserSession(t, rec.st)
	other := newUserSession(t, rec.st)

	a := helloConn(t, url)
	subscribe(t, a, ses)
	eventually(t, "the first connection is recorded", func() bool { return rec.online(t, ses) })
	if !srv.Connected(ses) {
		t.Fatal("the local check misses the connection")
	}

	b := helloConn(t, url)
	subscribe(t, b, ses)
	subscribe(t, b, other)
	eventually(t, "the second session is recorded", func() bool { return rec.online(t, other) })
	subscribe(t, a, ses) // subscribing again is no change
	a.Close()
	eventually(t, "the server drops the closed connection", func() bool { return srv.Connections() == 1 })
	if !rec.online(t, ses) {
		t.Fatal("the session went offline while another connection follows it")
	}
	b.Close()
	eventually(t, "the last connection is cleared", func() bool { return !rec.online(t, ses) && !rec.online(t, other) })
	if srv.Connected(ses) {
		t.Fatal("the local check still sees a closed connection")
	}
	if got := rec.of(ses); !slices.Equal(got, []int{1, 0}) {
		t.Fatalf("writes for the session: %v, want [1 0] (only the first arrival and the last departure)", got)
	}
}

// agent_invoke starts the run only once the connection is recorded: the
// agent may call a client tool through another process at once.
func TestPresenceRecordedBeforeInvoke(t *testing.T) {
	_, url, rec := newPresenceServer(t)
	hold := make(chan struct{})
	rec.mu.Lock()
	rec.hold = hold
	rec.mu.Unlock()

	c := helloConn(t, url)
	ses := ids.New("ses")
	if err := c.WriteJSON(map[string]any{"type": "agent_invoke", "request_id": "r1", "session_id": ses, "agent_id": "nobody", "message": map[string]any{"role": "user", "content": "hi"}}); err != nil {
		t.Fatal(err)
	}
	replies := make(chan map[string]any, 1)
	go func() {
		var m map[string]any
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		c.ReadJSON(&m)
		replies <- m
	}()
	select {
	case m := <-replies:
		t.Fatalf("the invoke was answered (%v) before the connection was recorded", m)
	case <-time.After(300 * time.Millisecond):
	}
	close(hold)
	m := <-replies
	if m["type"] != "error" || m["request_id"] != "r1" {
		t.Fatalf("invoke of an unknown agent: %v", m)
	}
	// The failed invoke leaves no presence behind.
	eventually(t, "the failed invoke's presence is cleared", func() bool { return slices.Equal(rec.of(ses), []int{1, 0}) })
	if rec.online(t, ses) {
		t.Fatal("a failed invoke left the session online")
	}
}

// Writes per session are in order and end at the latest wish, however the
// flips interleave with slow or failing writes; a failed write is retried.
func TestPresenceOrderAndRetry(t *testing.T) {
	var mu sync.Mutex
	var writes []int
	fails := 2
	p := newPresence(func(ctx context.Context, sessionID string, n int) error {
		time.Sleep(time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		if n == 1 && fails > 0 {
			fails--
			return errors.New("database unavailable")
		}
		writes = append(writes, n)
		return nil
	}, testLogger(t))
	for i := range 101 {
		p.set("s1", i%2 == 0) // ends connected
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	p.flushed(ctx, "s1")
	eventually(t, "the writer catches up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(writes) > 0 && writes[len(writes)-1] == 1
	})
	p.stop(ctx)
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(writes); i++ {
		if writes[i] == writes[i-1] {
			t.Fatalf("writes repeat a value (%v): they are not the flips in order", writes)
		}
	}
	if len(writes) > 5 {
		t.Fatalf("%d writes for a burst of flips: the writer does not coalesce", len(writes))
	}
	p.set("s1", false) // after stop: ignored
	if writes[len(writes)-1] != 1 {
		t.Fatalf("a write after stop: %v", writes)
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

// testWriter sends log lines to the test's log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}
