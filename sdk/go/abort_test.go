package agentplane_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// TestAbortHandlerClosesTheStream: a handler that drops the connection with
// panic(http.ErrAbortHandler) while a goroutine it started is still sending
// deltas — one of them stuck in a write to a platform that does not read —
// must leave no write to the ResponseWriter after ServeHTTP has returned
// (net/http reuses its buffers: the race detector sees it) and no write
// blocking the abort; the goroutine's later calls get ErrStreamClosed.
func TestAbortHandlerClosesTheStream(t *testing.T) {
	type outcome struct {
		err        error
		panicked   any
		afterServe bool // the first failing Delta was still writing when ServeHTTP had returned
	}
	served := make(chan struct{})
	done := make(chan outcome, 1)
	started := make(chan struct{})
	ah := &agentplane.AgentHandler{Logger: discardLogger(), Handler: func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		go func() {
			var o outcome
			defer func() {
				o.panicked = recover()
				done <- o
			}()
			chunk := strings.Repeat("x", 64<<10)
			for i := 0; ; i++ {
				if i == 4 {
					close(started)
				}
				if err := s.Delta(chunk); err != nil {
					select {
					case <-served:
						o.afterServe = true
					default:
					}
					// Once the handler is gone, every call says so.
					time.Sleep(50 * time.Millisecond)
					o.err = s.Delta("late")
					return
				}
			}
		}()
		<-started
		time.Sleep(300 * time.Millisecond) // the socket's buffers fill; a Delta blocks in its write
		panic(http.ErrAbortHandler)
	}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served) // runs as the abort unwinds ServeHTTP
		ah.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	// A raw connection that sends the invoke and never reads the answer.
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	body, _ := json.Marshal(defaultBody())
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST /invoke HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
	if _, err := conn.Write(b.Bytes()); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.panicked != nil {
			t.Fatalf("Delta panicked after the abort: %v", o.panicked)
		}
		if o.afterServe {
			t.Error("a Delta was still writing to the ResponseWriter after ServeHTTP had returned")
		}
		if !errors.Is(o.err, agentplane.ErrStreamClosed) {
			t.Fatalf("Delta after the abort = %v, want ErrStreamClosed", o.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the goroutine's Delta is still blocked 10 s after the abort")
	}
}
