package benchproc

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// HoldAgent is a real HTTP agent speaking DESIGN §5 SSE that holds its runs
// open: /invoke answers one delta at once (so the run is live), then only
// keep-alive comments, until Finish (then `done`) or the platform closes
// the request. The run ids it is invoked with arrive on Runs.
type HoldAgent struct {
	URL  string
	Runs chan string

	srv  *http.Server
	stop chan struct{}
	once sync.Once
	live atomic.Int64
}

// StartHoldAgent serves a HoldAgent on a loopback port.
func StartHoldAgent() (*HoldAgent, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a := &HoldAgent{URL: "http://" + ln.Addr().String(), Runs: make(chan string, 10000), stop: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })
	mux.HandleFunc("POST /invoke", a.invoke)
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go a.srv.Serve(ln)
	return a, nil
}

func (a *HoldAgent) invoke(w http.ResponseWriter, r *http.Request) {
	var body struct {
		RunID string `json:"run_id"`
	}
	json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	io.WriteString(w, "event: delta\ndata: {\"text\":\"holding the run open for the benchmark\"}\n\n")
	rc.Flush()
	a.live.Add(1)
	defer a.live.Add(-1)
	a.Runs <- body.RunID
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-a.stop:
			io.WriteString(w, "event: done\ndata: {\"usage\":{}}\n\n")
			rc.Flush()
			return
		case <-r.Context().Done():
			return
		case <-t.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// Finish makes every held run's stream send done, and waits (up to 5 s)
// until they have.
func (a *HoldAgent) Finish() {
	a.once.Do(func() { close(a.stop) })
	deadline := time.Now().Add(5 * time.Second)
	for a.live.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
}

// Close finishes the runs and stops the server.
func (a *HoldAgent) Close() {
	a.Finish()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	a.srv.Shutdown(ctx)
	a.srv.Close()
}
