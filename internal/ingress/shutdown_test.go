package ingress

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A shutdown closes a client only after it was sent every event committed
// before the shutdown began, even when the last of them sit in a large
// batch still being written (issue 8 item 5: the drain compared the
// subscription's cursor, which moves before the write).
func TestShutdownSendsEverythingCommittedBeforeTheClose(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		srv, log, url, sid := ingressOn(t, dialect)
		ctx := context.Background()
		c := helloConn(t, url)
		c.WriteJSON(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})

		// One commit of 16 MiB of deltas and the run's end: the delivery
		// takes them as one batch and is still writing it when the
		// shutdown begins.
		text, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 256<<10)})
		var evs []store.EventParams
		for range 64 {
			evs = append(evs, store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: text})
		}
		evs = append(evs, store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeRunFailed, Payload: json.RawMessage(`{"code":"platform_shutdown","message":"m"}`)})
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
