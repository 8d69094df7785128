package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// A delivery of many events writes several frames per write to the socket
// (writeAll). A gorilla/websocket client reads every one of them intact
// and in order, at each of the frame header's length boundaries (125 / 126,
// 65,535 / 65,536 bytes) and past the bytes one write carries, where a
// message goes alone.
func TestBacklogFramesArriveIntact(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		_, log, url, sid := ingressOn(t, dialect)
		ctx := context.Background()
		// The delta's message is its text plus ~150 bytes of envelope, so
		// these texts put messages on both sides of each boundary.
		var sizes []int
		for _, boundary := range []int{125, 126, 0xffff, 0x10000, coalesceMax} {
			for d := -200; d <= 200; d += 25 {
				if n := boundary + d; n > 0 {
					sizes = append(sizes, n)
				}
			}
		}
		for i := range 300 {
			sizes = append(sizes, i%40) // many small ones: several writes' worth
		}
		var evs []store.EventParams
		for i, n := range sizes {
			text := fmt.Sprintf("%d:", i) + strings.Repeat("é", n/2)
			payload, _ := json.Marshal(map[string]string{"text": text})
			evs = append(evs, store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: payload})
		}
		if _, err := log.Append(ctx, evs...); err != nil {
			t.Fatal(err)
		}

		// Subscribing from the start delivers the whole backlog at once.
		c := helloConn(t, url)
		c.WriteJSON(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		for i, n := range sizes {
			var m map[string]any
			if err := c.ReadJSON(&m); err != nil {
				t.Fatalf("message %d of %d: %v", i, len(sizes), err)
			}
			want := fmt.Sprintf("%d:", i) + strings.Repeat("é", n/2)
			if m["type"] != "delta" || m["text"] != want || m["seq"] != float64(i+1) {
				t.Fatalf("message %d: type %v seq %v, text of %d bytes; want delta %d with %d bytes", i, m["type"], m["seq"], len(fmt.Sprint(m["text"])), i+1, len(want))
			}
		}
	})
}

// appendTextFrame's frames, written straight to the socket as writeAll
// does, are read back by a gorilla/websocket client at every length the
// header encodes differently: 7 bits up to 125, 16 up to 65,535, 64 above.
func TestAppendTextFrameAtLengthBoundaries(t *testing.T) {
	lengths := []int{0, 1, 124, 125, 126, 127, 0xfffe, 0xffff, 0x10000, 0x10001, 200000}
	upgrader := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		var buf []byte
		for i, n := range lengths {
			buf = appendTextFrame(buf, []byte(strings.Repeat(string(rune('a'+i)), n)))
		}
		ws.NetConn().Write(buf)
		ws.ReadMessage() // until the client goes
	}))
	t.Cleanup(hs.Close)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for i, n := range lengths {
		typ, b, err := c.ReadMessage()
		if err != nil || typ != websocket.TextMessage || string(b) != strings.Repeat(string(rune('a'+i)), n) {
			t.Fatalf("frame %d (%d bytes): type %d, %d bytes, %v", i, n, typ, len(b), err)
		}
	}
}

// A delivery written long after the last ping is not cut by the ping's
// write deadline: gorilla/websocket's SetWriteDeadline only takes effect
// on its own writes, and a ping leaves the socket's deadline at its own,
// so writeAll's coalesced write (straight to the socket) must set the
// socket's. A client silent for longer than the write timeout after a
// ping lost its connection when several events arrived at once (an agent
// quiet for 35 s, then its last delta and done).
func TestCoalescedWriteLongAfterAPing(t *testing.T) {
	st := testdb.Open(t, "sqlite")
	_, log, url := serveIngress(t, st, Options{PingInterval: 500 * time.Millisecond, PongWait: 10 * time.Second, WriteTimeout: 100 * time.Millisecond})
	sid := newUserSession(t, st)
	c := helloConn(t, url)
	c.WriteJSON(map[string]any{"type": "subscribe", "session_id": sid, "after_seq": 0})
	got := make(chan error, 1)
	const batches = 6
	go func() {
		for i := range batches * 2 {
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			var m map[string]any
			if err := c.ReadJSON(&m); err != nil { // answers pings meanwhile
				got <- fmt.Errorf("message %d of %d: %w", i, batches*2, err)
				return
			}
			if m["type"] != "delta" || m["seq"] != float64(i+1) {
				got <- fmt.Errorf("message %d: %v", i, m)
				return
			}
		}
		got <- nil
	}()
	// Batches of two (one coalesced write each) 130 ms apart: at least
	// one lands between 100 ms after a ping and the next ping, past the
	// ping's deadline.
	time.Sleep(700 * time.Millisecond)
	for i := range batches {
		payload := json.RawMessage(fmt.Sprintf(`{"text":"%d"}`, i))
		ev := store.EventParams{SessionID: sid, RunID: "run_1", TS: 1, Type: eventlog.TypeAgentStreamDelta, Payload: payload}
		if _, err := log.Append(context.Background(), ev, ev); err != nil {
			t.Fatal(err)
		}
		time.Sleep(130 * time.Millisecond)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
