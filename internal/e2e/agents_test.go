package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedAgent is a real HTTP agent whose behaviour a test picks; it
// counts requests and reports when the platform closed one.
type scriptedAgent struct {
	*httptest.Server
	requests atomic.Int32
	closed   chan struct{} // one value per request whose context ended early
}

type agentMode int

const (
	modeStreamForever agentMode = iota // a delta every 50 ms until the request ends
	modeStream                         // n deltas then done
	modeHTTP500
	modeMalformed
	modeCloseEarly
	modeSilent
)

func newScriptedAgent(t *testing.T, mode agentMode, n int) *scriptedAgent {
	t.Helper()
	a := &scriptedAgent{closed: make(chan struct{}, 16)}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		// net/http notices a closed client only once the body is consumed.
		io.Copy(io.Discard, r.Body)
		flush := func() { http.NewResponseController(w).Flush() }
		if mode == modeHTTP500 {
			http.Error(w, "boom", 500)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		flush()
		switch mode {
		case modeMalformed:
			fmt.Fprint(w, "event: delta\ndata: {not json\n\n")
			return
		case modeCloseEarly:
			fmt.Fprint(w, "event: delta\ndata: {\"text\":\"partial\"}\n\n")
			return
		case modeSilent:
			<-r.Context().Done()
			return
		}
		for i := 0; mode == modeStreamForever || i < n; i++ {
			select {
			case <-r.Context().Done():
				a.noteClosed()
				return
			case <-time.After(50 * time.Millisecond):
			}
			if _, err := fmt.Fprintf(w, "event: delta\ndata: {\"text\":\"w%d \"}\n\n", i); err != nil {
				a.noteClosed()
				return
			}
			flush()
		}
		fmt.Fprint(w, "event: done\ndata: {\"usage\":{\"words\":", n, "}}\n\n")
	})
	a.Server = httptest.NewServer(mux)
	t.Cleanup(func() {
		// Close cuts streams that would otherwise run until the platform
		// goes away, which happens after this cleanup.
		a.CloseClientConnections()
		a.Close()
	})
	return a
}

func (a *scriptedAgent) noteClosed() {
	select {
	case a.closed <- struct{}{}:
	default:
	}
}
