package e2e

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ---------------------------------------------------------------------------
// A crash in the middle of server tool calls (issue 13).
//
// An allowed server call is created, decided, dispatched and claimed
// (RUNNING) in one transaction, then POSTed, then its result is committed.
// The process is killed (SIGKILL) while several agents call a fast server
// tool as quickly as they can, so calls are caught at every step: before
// their first commit, between the claim and the POST, between the POST and
// the result, after it. After the restart nothing the tool received is
// lost (every call it got is recorded, and one that answered succeeded is
// SUCCEEDED), nothing ran twice (each call id reached the tool once, and
// none is sent again after the restart), and nothing is left in flight: a
// call claimed but without a result ends FAILED outcome_unknown, never
// CANCELLED (which would say it never ran).

func TestToolCallsKilledMidFlight(t *testing.T) {
	eachStore(t, func(t *testing.T, dsn string) {
		s := startServer(t, dsn, "--shutdown-grace", "1s")
		te := newToolEndpoint(t)
		putTool(t, s, "srv.fast", map[string]any{"kind": "server", "description": "Echoes its args.", "endpoint": te.URL,
			"on_failure": "return_to_agent", "policy": map[string]any{"decision": "allow"}})
		ga := startGoToolAgent(t, s, "go-crash")
		c := dial(t, s, "alice", "alice-key")

		const callers = 4
		var runs []string
		for range callers {
			c.invokeSpec("go-crash", "", map[string]any{"hold": true})
			runs = append(runs, ga.held(t))
		}

		// Each caller invokes in a loop until the process dies; it notes the
		// calls it was told succeeded.
		var (
			mu        sync.Mutex
			succeeded = map[string]bool{}
			stop      atomic.Bool
			wg        sync.WaitGroup
		)
		client := &http.Client{Timeout: 30 * time.Second}
		for i, runID := range runs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; !stop.Load(); n++ {
					body, _ := json.Marshal(map[string]any{"run_id": runID, "args": map[string]any{"caller": i, "n": n}})
					req, _ := http.NewRequest("POST", s.URL+"/v1/tools/srv.fast:invoke", bytes.NewReader(body))
					req.Header.Set("Authorization", "Bearer "+ga.key)
					req.Header.Set("Content-Type", "application/json")
					resp, err := client.Do(req)
					if err != nil {
						return // the process is gone
					}
					var v map[string]any
					json.NewDecoder(resp.Body).Decode(&v)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK && v["status"] == "succeeded" {
						mu.Lock()
						succeeded[sv(v, "tool_call_id")] = true
						mu.Unlock()
					}
				}
			}()
		}
		// Let calls flow, then kill the process in the middle of them.
		deadline := time.Now().Add(60 * time.Second)
		for te.count() < 150 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		s.kill()
		stop.Store(true)
		wg.Wait()
		received := te.count()
		if received < 150 {
			t.Fatalf("the tool got only %d calls before the kill", received)
		}

		s.restart()
		for _, runID := range runs {
			if run := waitRunEnded(t, s, runID); run["status"] != "FAILED" || obj(run, "error")["code"] != "platform_restarted" {
				t.Fatalf("run %s after the restart: %v", runID, run)
			}
		}
		assertSettled(t, dsn)
		time.Sleep(500 * time.Millisecond) // anything sent again after the restart would arrive by now

		// Each call reached the tool at most once, and none after the kill.
		te.mu.Lock()
		hits := append([]toolHit(nil), te.hits...)
		te.mu.Unlock()
		if len(hits) != received {
			t.Fatalf("the tool got %d calls after the restart (had %d at the kill)", len(hits), received)
		}
		got := map[string]bool{}
		for _, h := range hits {
			id := sv(h.body, "tool_call_id")
			if got[id] {
				t.Fatalf("call %s reached the tool twice", id)
			}
			got[id] = true
		}

		// Every call recorded in the runs' sessions is final, and ended as
		// its delivery says.
		recorded := map[string]bool{}
		var unknown, ok int
		for _, runID := range runs {
			code, run := s.call("GET", "/v1/runs/"+runID, adminKey, nil)
			if code != http.StatusOK {
				t.Fatalf("GET run %s: %d %v", runID, code, run)
			}
			for _, e := range s.events("/v1/sessions/" + sv(run, "session_id") + "/events") {
				if e["type"] != "tool_call_created" {
					continue
				}
				id := sv(payload(e), "tool_call_id")
				recorded[id] = true
				v := toolCall(t, s, id)
				switch {
				case v["state"] == "SUCCEEDED":
					if !got[id] {
						t.Fatalf("call %s is SUCCEEDED but never reached the tool: %v", id, v)
					}
					ok++
				case v["state"] == "FAILED" && sv(obj(v, "error"), "code") == "outcome_unknown":
					unknown++ // claimed when the process died: sent or not, never again
				case v["state"] == "CANCELLED":
					if got[id] {
						t.Fatalf("call %s reached the tool but is recorded as cancelled (never sent): %v", id, v)
					}
				default:
					t.Fatalf("call %s after the restart: %v", id, v)
				}
			}
		}
		// Nothing the tool received is lost: each call it got was durable
		// before it was sent.
		for id := range got {
			if !recorded[id] {
				t.Fatalf("the tool got call %s, which is not recorded", id)
			}
		}
		mu.Lock()
		for id := range succeeded {
			if v := toolCall(t, s, id); v["state"] != "SUCCEEDED" {
				t.Fatalf("call %s answered succeeded before the kill, now: %v", id, v)
			}
		}
		n := len(succeeded)
		mu.Unlock()
		t.Logf("tool got %d calls; %d recorded: %d succeeded (%d answered before the kill), %d outcome_unknown", received, len(recorded), ok, n, unknown)
	})
}
