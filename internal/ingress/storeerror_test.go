package ingress

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A store error while a delivery catches up does not end it: the events it
// was reading, and later ones, still reach the client, in order and once,
// when the store answers again — even when what sent it to the store was
// another process's commit, of which no further word comes. The delivery used to stop for good after telling the
// client "subscription_failed" (naming no session), while the connection
// still counted as the session's client — and an agent_invoke on that
// session then kept the dead delivery, so its run's events never came.
func TestDeliveryOutlivesAStoreError(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		_, log, url, sid := ingressOn(t, dialect)
		st, ctx := log.Store(), context.Background()
		// Another process on the same database: its commits reach this
		// one's subscriptions only as the notification Notified stands for.
		other := eventlog.New(st, eventlog.Options{})
		t.Cleanup(other.Stop)
		appendDelta := func(log *eventlog.Log, text string) {
			t.Helper()
			p, _ := json.Marshal(map[string]string{"text": text})
			if _, err := log.Append(ctx, store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: p}); err != nil {
				t.Fatal(err)
			}
		}
		c := helloConn(t, url)
		subscribe(t, c, sid)
		appendDelta(log, "before")
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var m map[string]any
		if err := c.ReadJSON(&m); err != nil || m["text"] != "before" {
			t.Fatalf("first event: %v %v", m, err)
		}

		// The other process commits; when its notification arrives, the
		// events table is away and the delivery's catch-up read fails.
		appendDelta(other, "after")
		if err := testdb.Exec(t, st, "ALTER TABLE events RENAME TO events_away"); err != nil {
			t.Fatal(err)
		}
		log.Notified("another-process", []string{sid})
		time.Sleep(500 * time.Millisecond)
		if err := testdb.Exec(t, st, "ALTER TABLE events_away RENAME TO events"); err != nil {
			t.Fatal(err)
		}

		c.SetReadDeadline(time.Now().Add(15 * time.Second))
		for {
			var m map[string]any
			if err := c.ReadJSON(&m); err != nil {
				t.Fatalf("waiting for the event after the store error: %v", err)
			}
			if m["type"] == "delta" {
				if m["text"] != "after" || m["seq"] != float64(2) {
					t.Fatalf("got %v, want the delta after, seq 2", m)
				}
				return
			}
			t.Logf("meanwhile: %v", m)
		}
	})
}
