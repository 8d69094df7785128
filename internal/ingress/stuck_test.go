package ingress

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A shutdown is not held a second per client that stopped reading: the
// 1001 closes go out together, not one after another each waiting out its
// write deadline behind the stuck delivery, so a handful of stalled
// clients do not push the server past its shutdown deadline (and with it
// the removal of its presence and connection-count rows).
func TestShutdownNotHeldByStuckClients(t *testing.T) {
	st := testdb.Open(t, "sqlite")
	srv, log, url := serveIngress(t, st, Options{DrainWait: 200 * time.Millisecond})
	sid := newUserSession(t, st)
	ctx := context.Background()

	// 16 MiB of deltas: far more than the sockets' buffers hold.
	text, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 256<<10)})
	var evs []store.EventParams
	for range 64 {
		evs = append(evs, store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: text})
	}
	if _, err := log.Append(ctx, evs...); err != nil {
		t.Fatal(err)
	}
	// Clients with small receive buffers that subscribe and never read again.
	dialer := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetReadBuffer(4 << 10)
		}
		return c, err
	}}
	const clients = 6
	for range clients {
		c, _, err := dialer.Dial(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		c.WriteJSON(map[string]any{"type": "hello", "user_id": "u", "api_key": "k"})
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil || m["type"] != "ready" {
			t.Fatalf("hello: %v %v", m, err)
		}
		c.WriteJSON(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
	}
	time.Sleep(time.Second) // every delivery fills its socket and blocks

	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("Shutdown took %v with %d stuck clients (drain wait 200ms)", took, clients)
	}
	eventually(t, "every connection is closed", func() bool { return srv.Connections() == 0 })
}
