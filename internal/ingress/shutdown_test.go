package ingress

import (
	"context"
	"encoding/json"
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

// A shutdown closes a client only after it was sent every event committed
// before the shutdown began, even when the last of them sit in a large
// batch still being written (issue 8 item 5: the drain compared the
// subscription's cursor, which moves before the write).
func TestShutdownSendsEverythingCommittedBeforeTheClose(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		log := eventlog.New(st, eventlog.Options{})
		t.Cleanup(log.Stop)
		runs := run.New(log, run.Options{InstanceID: "t", Invoker: &agent.Client{}})
		srv := New(auth.New("admin-key-0123456789", map[string]string{"u": "k"}, st), runs, log, Options{})
		hs := httptest.NewServer(srv)
		t.Cleanup(hs.Close)
		ctx := context.Background()
		if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "ses_drain", UserID: "u", CreatedAt: 1}); err != nil {
			t.Fatal(err)
		}
		c := helloConn(t, "ws"+strings.TrimPrefix(hs.URL, "http"))
		c.WriteJSON(map[string]any{"type": "subscribe", "session_id": "ses_drain", "after_seq": 0})

		// One commit of 16 MiB of deltas and the run's end: the delivery
		// takes them as one batch and is still writing it when the
		// shutdown begins.
		text, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 256<<10)})
		var evs []store.EventParams
		for range 64 {
			evs = append(evs, store.EventParams{SessionID: "ses_drain", RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: text})
		}
		evs = append(evs, store.EventParams{SessionID: "ses_drain", RunID: "run_1", TS: 1, Type: eventlog.TypeRunFailed, Payload: json.RawMessage(`{"code":"platform_shutdown","message":"m"}`)})
		if _, err := log.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		var first map[string]any
		if err := c.ReadJSON(&first); err != nil || first["type"] != "delta" {
			t.Fatalf("first message %v %v", first["type"], err)
		}

		stopped := make(chan struct{})
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 60*time.Second) // generous: 16 MiB through a -race build on a loaded machine
			defer cancel()
			srv.Shutdown(sctx)
			close(stopped)
		}()
		got := 1
		var last map[string]any
		for {
			var m map[string]any
			if err := c.ReadJSON(&m); err != nil {
				if !websocket.IsCloseError(err, websocket.CloseGoingAway) {
					t.Fatalf("after %d messages: %v, want close 1001", got, err)
				}
				break
			}
			got++
			last = m
		}
		<-stopped
		if got != 65 || last["type"] != "error" || last["code"] != "platform_shutdown" {
			t.Fatalf("the client got %d of 65 messages before the close, the last %v", got, last["type"])
		}
	})
}
