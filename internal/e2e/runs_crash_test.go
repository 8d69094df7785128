package e2e

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestShortRunsKilledMidFlight kills the server (SIGKILL) while a client
// runs short runs back to back, each answered at once with three deltas
// and done in one write — so a run's output and its end are submitted
// together and share a commit (eventlog.Chain, issue 10). After a restart
// the log must show that nothing delivered was lost and that no run ended
// without its output: every event a client was sent is in the log at its
// seq; every run the log started has ended, DONE with all three deltas
// before its run_done, or FAILED platform_restarted.
func TestShortRunsKilledMidFlight(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		ag := fastAgent(t)
		s := startServer(t, dsn)
		for round := range 3 {
			s.register("fast", ag.URL)
			c := dial(t, s, "alice", "alice-key")
			delivered := map[int64]string{} // seq → type, as the client got it
			sessionID := ""
			killed := make(chan struct{})
			go func() {
				time.Sleep(time.Duration(300+round*150) * time.Millisecond)
				s.kill()
				close(killed)
			}()
		runs:
			for i := 0; ; i++ {
				inv := map[string]any{"type": "agent_invoke", "request_id": fmt.Sprint("r", i), "agent_id": "fast", "message": map[string]any{"role": "user", "content": "go"}}
				if sessionID != "" {
					inv["session_id"] = sessionID
				}
				if err := c.conn.WriteJSON(inv); err != nil {
					break
				}
				for {
					m, err := c.read(10 * time.Second)
					if err != nil {
						break runs // the server is gone
					}
					if seq := seqOf(m); seq > 0 {
						delivered[seq], _ = m["type"].(string)
						sessionID, _ = m["session_id"].(string)
					}
					if isEnd(m) {
						break
					}
				}
			}
			<-killed
			s.restart()
			if sessionID == "" {
				t.Fatalf("round %d: no run started before the kill", round)
			}

			evs := s.events("/v1/sessions/" + sessionID + "/events?limit=10000")
			logged := map[int64]string{}
			for _, e := range evs {
				logged[int64(e["seq"].(float64))], _ = e["type"].(string)
			}
			for seq, typ := range delivered {
				if logged[seq] == "" {
					t.Fatalf("round %d: seq %d (%s) was delivered but is not in the log", round, seq, typ)
				}
			}
			// Each run's events in log order: its deltas, then how it ended.
			type runLog struct {
				deltas int
				end    string
				endAt  int // deltas seen when it ended
				code   string
			}
			byRun := map[string]*runLog{}
			var order []string
			for _, e := range evs {
				id, _ := e["run_id"].(string)
				if id == "" {
					continue
				}
				r := byRun[id]
				if r == nil {
					r = &runLog{}
					byRun[id] = r
					order = append(order, id)
				}
				switch e["type"] {
				case "agent_stream_delta":
					r.deltas++
				case "run_done", "run_failed", "run_cancelled":
					r.end, r.endAt = e["type"].(string), r.deltas
					if p, ok := e["payload"].(map[string]any); ok {
						r.code, _ = p["code"].(string)
					}
				}
			}
			done, failed := 0, 0
			for _, id := range order {
				r := byRun[id]
				switch {
				case r.end == "run_done" && r.endAt == 3 && r.deltas == 3:
					done++
				case r.end == "run_failed" && r.code == "platform_restarted":
					failed++
				default:
					t.Fatalf("round %d: run %s ended %q (code %q) after %d of its deltas, %d in all; want run_done after all 3, or run_failed platform_restarted",
						round, id, r.end, r.code, r.endAt, r.deltas)
				}
			}
			if done == 0 {
				t.Fatalf("round %d: no run finished before the kill", round)
			}
			t.Logf("round %d: %d runs done, %d failed by the restart, %d events delivered", round, done, failed, len(delivered))
		}
	})
}

// fastAgent answers every invoke at once: three deltas and done, in one
// write.
func fastAgent(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("POST /invoke", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "event: delta\ndata: {\"text\":\"a \"}\n\nevent: delta\ndata: {\"text\":\"b \"}\n\nevent: delta\ndata: {\"text\":\"c\"}\n\nevent: done\ndata: {}\n\n")
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}
