package agent

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Concurrent requests to one agent or tool reuse their connections: the
// client keeps one idle connection per request in flight, so 8 callers
// making 400 requests open about 8 connections, not hundreds (net/http's
// default of 2 idle per host closed one connection per answered request
// beyond the second).
func TestConcurrentCallsKeepTheirConnections(t *testing.T) {
	var opened atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte(`{"ok":true}`))
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			opened.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := NewHTTPClient(mustAllowlist(t, "127.0.0.1/32,::1/128"))
	const callers, each = 8, 50
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				resp, err := c.Post(srv.URL, "application/json", nil)
				if err != nil {
					t.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				// The caller's own work between calls (a run's commits):
				// meanwhile the others' connections are idle too.
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	wg.Wait()
	if n := opened.Load(); n > 2*callers {
		t.Fatalf("%d connections opened for %d requests from %d callers, want at most %d", n, callers*each, callers, 2*callers)
	}
}
