package ingress

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// serveIngress serves an ingress over st, with user "u" whose key is "k",
// and returns it, its event log and its WebSocket URL.
func serveIngress(t *testing.T, st store.Store, opts Options) (*Server, *eventlog.Log, string) {
	t.Helper()
	log := eventlog.New(st, eventlog.Options{})
	srv, url := serveIngressOn(t, log, opts)
	return srv, log, url
}

// serveIngressOn is serveIngress over log (stopped when the test ends), for
// tests that build services on the log first.
func serveIngressOn(t *testing.T, log *eventlog.Log, opts Options) (*Server, string) {
	t.Helper()
	t.Cleanup(log.Stop)
	runs := run.New(log, run.Options{InstanceID: "t", Invoker: &agent.Client{}})
	srv := New(auth.New("admin-key-0123456789", map[string]string{"u": "k"}, log.Store()), runs, log, opts)
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return srv, "ws" + strings.TrimPrefix(hs.URL, "http")
}

// ingressOn is serveIngress on a fresh database of dialect, with a session
// of user "u" to follow.
func ingressOn(t *testing.T, dialect string) (srv *Server, log *eventlog.Log, url, sessionID string) {
	t.Helper()
	st := testdb.Open(t, dialect)
	// A drain as long as a -race build on a loaded machine needs for the
	// shutdown test's 16 MiB (2 s, the default, is not).
	srv, log, url = serveIngress(t, st, Options{DrainWait: 60 * time.Second})
	return srv, log, url, newUserSession(t, st)
}

func newTestServer(t *testing.T, opts Options) string {
	t.Helper()
	_, _, url := serveIngress(t, testdb.Open(t, "sqlite"), opts)
	return url
}

func helloConn(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.WriteJSON(map[string]any{"type": "hello", "user_id": "u", "api_key": "k"})
	var m map[string]any
	if err := c.ReadJSON(&m); err != nil || m["type"] != "ready" {
		t.Fatalf("hello: %v %v", m, err)
	}
	return c
}

func TestPingKeepsLiveClientsAndDropsDeadOnes(t *testing.T) {
	// Margins are wide: a loaded -race CI machine can stall a goroutine for
	// hundreds of milliseconds, which must not look like a dead client.
	url := newTestServer(t, Options{PingInterval: 200 * time.Millisecond, PongWait: 1500 * time.Millisecond})

	live := helloConn(t, url) // gorilla answers pings with pongs while reading
	dead := helloConn(t, url)
	pings := make(chan struct{}, 100)
	dead.SetPingHandler(func(string) error { pings <- struct{}{}; return nil }) // never pongs

	liveErr := make(chan error, 1)
	go func() {
		live.SetReadDeadline(time.Now().Add(4 * time.Second))
		_, _, err := live.ReadMessage()
		liveErr <- err
	}()
	dead.SetReadDeadline(time.Now().Add(15 * time.Second))
	_, _, err := dead.ReadMessage()
	if err == nil || strings.Contains(err.Error(), "timeout") {
		t.Fatalf("a client that never pongs was not dropped: %v", err)
	}
	if len(pings) == 0 {
		t.Fatal("server sent no pings")
	}
	// The live client outlasted the dead one's pong wait several times over,
	// and was only ended by its own read deadline.
	if err := <-liveErr; err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("live client: %v, want its own read timeout", err)
	}
}

// A client that says no hello in time is told so — error hello_timeout,
// then a close 1008, as a bad hello is answered — not only disconnected.
func TestHelloTimeout(t *testing.T) {
	url := newTestServer(t, Options{HelloTimeout: 200 * time.Millisecond})
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectHelloTimeout(t, c)
}

// expectHelloTimeout reads what a client without hello gets at the hello
// deadline: error hello_timeout and a close 1008.
func expectHelloTimeout(t *testing.T, c *websocket.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	var m map[string]any
	if err := c.ReadJSON(&m); err != nil {
		t.Fatalf("a client without hello got no error before the close: %v", err)
	}
	if m["type"] != "error" || m["code"] != "hello_timeout" || m["message"] == "" || m["seq"] != nil {
		t.Fatalf("a client without hello got %v, want error hello_timeout", m)
	}
	if _, _, err := c.ReadMessage(); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("after hello_timeout: %v, want close 1008", err)
	}
}

// Pongs before hello do not extend the hello deadline (they once did, so
// a client sending them kept an unauthenticated connection open).
func TestHelloTimeoutIgnoresPongs(t *testing.T) {
	url := newTestServer(t, Options{HelloTimeout: 300 * time.Millisecond})
	c, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if c.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Second)) != nil {
				return
			}
		}
	}()
	expectHelloTimeout(t, c)
}
