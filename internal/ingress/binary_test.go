package ingress

import (
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// A binary frame is refused (only JSON text frames are taken) with the
// request_id it carries, as every refused client message is (DESIGN §4):
// a client whose library sent its request as bytes learns which request
// failed instead of waiting for an answer that never names it. The
// connection stays open.
func TestBinaryFrameRefusalNamesItsRequest(t *testing.T) {
	c := helloConn(t, newTestServer(t, Options{}))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := c.WriteMessage(websocket.BinaryMessage, []byte(`{"type":"cancel_run","request_id":"b1","run_id":"run_x"}`)); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := c.ReadJSON(&m); err != nil || m["type"] != "error" || m["code"] != "invalid_message" || m["request_id"] != "b1" {
		t.Fatalf("binary frame: %v %v, want invalid_message for b1", m, err)
	}
	c.WriteJSON(map[string]any{"type": "cancel_run", "request_id": "t1", "run_id": "run_x"})
	if err := c.ReadJSON(&m); err != nil || m["type"] != "error" || m["request_id"] != "t1" {
		t.Fatalf("after the binary frame: %v %v, want the connection open", m, err)
	}
}
