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
