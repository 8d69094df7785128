package run

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// refusingStore is a real store that refuses, as a database error, every
// event append whose payload contains marker — the injection point for
// "the store failed one append" (issue 8 item 2). Everything else reaches
// the real database.
type refusingStore struct {
	store.Store
	marker []byte
}

func (s *refusingStore) InTx(ctx context.Context, fn func(tx store.Queries) error) error {
	return s.Store.InTx(ctx, func(tx store.Queries) error {
		return fn(&refusingQueries{Queries: tx, marker: s.marker})
	})
}

func (s *refusingStore) EventsAppend(ctx context.Context, evs []store.EventParams) ([]store.Event, error) {
	return (&refusingQueries{Queries: s.Store, marker: s.marker}).EventsAppend(ctx, evs)
}

type refusingQueries struct {
	store.Queries
	marker []byte
}

var errInjected = errors.New("injected: the database refused the row")

func (q *refusingQueries) EventsAppend(ctx context.Context, evs []store.EventParams) ([]store.Event, error) {
	for _, e := range evs {
		if bytes.Contains(e.Payload, q.marker) {
			return nil, errInjected
		}
	}
	return q.Queries.EventsAppend(ctx, evs)
}

// EventsAppendNotify is where the event log's last appends of a
// transaction go: refused alike.
func (q *refusingQueries) EventsAppendNotify(ctx context.Context, evs []store.EventParams, origin string, sessions []string) ([]store.Event, error) {
	for _, e := range evs {
		if bytes.Contains(e.Payload, q.marker) {
			return nil, errInjected
		}
	}
	return q.Queries.EventsAppendNotify(ctx, evs, origin, sessions)
}

// sseAgent is a real HTTP agent that answers every invoke with events.
func sseAgent(t *testing.T, events ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range events {
			fmt.Fprint(w, ev)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// loopbackInvoker reaches agents on 127.0.0.1, as the e2e allowlist does.
func loopbackInvoker(t *testing.T) *agent.Client {
	t.Helper()
	allow, err := agent.ParseAllowlist("127.0.0.1/32")
	if err != nil {
		t.Fatal(err)
	}
	return &agent.Client{HTTP: agent.NewHTTPClient(allow)}
}

// newTestManager is a run manager over st with agentID registered at url.
func newTestManager(t *testing.T, st store.Store, opts Options, agentID, url string) *Manager {
	t.Helper()
	ctx := context.Background()
	if _, err := st.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: agentID, Name: agentID, Endpoint: url, Capabilities: json.RawMessage(`[]`), LinkedAgents: json.RawMessage(`[]`), At: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	log := eventlog.New(st, eventlog.Options{})
	if opts.InstanceID == "" {
		opts.InstanceID = "test"
	}
	if opts.Invoker == nil {
		opts.Invoker = loopbackInvoker(t)
	}
	opts.HeartbeatInterval = time.Hour
	m := New(log, opts)
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		m.Shutdown(ctx)
		log.Stop()
	})
	return m
}

// waitEnded polls until the run is terminal (10 s at most).
func waitEnded(t *testing.T, st store.Store, runID string) *store.Run {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r, err := st.RunGet(context.Background(), runID)
		if err != nil {
			t.Fatal(err)
		}
		if store.RunIsTerminal(r.Status) {
			return r
		}
	}
	t.Fatalf("run %s did not end", runID)
	return nil
}

func runEvents(t *testing.T, st store.Store, runID string) []store.Event {
	t.Helper()
	evs, err := st.EventsList(context.Background(), &store.EventsListParams{RunID: runID, Limit: 10000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func errorCode(r *store.Run) string {
	var e struct {
		Code string `json:"code"`
	}
	json.Unmarshal(r.Error, &e)
	return e.Code
}

// A store error on the agent's last delta or state — right before `done`
// or `input_required` — fails the run with platform_error. It used to be
// noticed only at the next event, so the done path committed DONE with the
// event missing; now the end is submitted in the output's chain, right
// behind it, and must not commit without it.
func TestAppendErrorBeforeDoneFailsTheRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		done := "event: done\ndata: {}\n\n"
		asks := "event: input_required\ndata: {\"question\":\"Which city?\"}\n\n"
		for name, tail := range map[string][]string{
			"delta":                 {"event: delta\ndata: {\"text\":\"POISON\"}\n\n", done},
			"state":                 {"event: state\ndata: {\"state\":\"POISON\",\"detail\":{}}\n\n", done},
			"delta before question": {"event: delta\ndata: {\"text\":\"POISON\"}\n\n", asks},
		} {
			t.Run(name, func(t *testing.T) {
				st := &refusingStore{Store: testdb.Open(t, dialect), marker: []byte("POISON")}
				ag := sseAgent(t, append([]string{"event: delta\ndata: {\"text\":\"fine \"}\n\n"}, tail...)...)
				m := newTestManager(t, st, Options{}, "a", ag.URL)
				started, err := m.StartRun(context.Background(), StartParams{UserID: "u", AgentID: "a", Message: agent.Message{Role: "user", Content: "hi"}})
				if err != nil {
					t.Fatal(err)
				}
				r := waitEnded(t, st, started.Run.RunID)
				if r.Status != store.RunFailed || errorCode(r) != "platform_error" {
					t.Fatalf("run ended %s %s, want FAILED platform_error", r.Status, r.Error)
				}
				var types []string
				for _, e := range runEvents(t, st, r.RunID) {
					types = append(types, e.Type)
					if e.Type == eventlog.TypeRunDone || e.Type == eventlog.TypeInputRequired {
						t.Fatalf("%s recorded for a run whose output was not: %s", e.Type, e.Payload)
					}
				}
				if types[len(types)-1] != eventlog.TypeRunFailed {
					t.Fatalf("events %v", types)
				}
				// The transcript keeps no answer the log does not hold.
				msgs, _ := st.MessagesList(context.Background(), &store.MessagesListParams{SessionID: r.SessionID, Limit: 10})
				for _, msg := range msgs {
					if msg.Role == "assistant" || strings.Contains(msg.Content, "POISON") {
						t.Fatalf("transcript %v", msgs)
					}
				}
			})
		}
	})
}

// floodAgent streams deltas of size bytes (or, with states, state events)
// until it has sent total bytes or the platform closes the request, then
// done. closed reports whether the platform closed it first.
func floodAgent(t *testing.T, size, total int, states bool) (*httptest.Server, chan bool) {
	t.Helper()
	closed := make(chan bool, 1)
	chunk := strings.Repeat("x", size)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for sent := 0; sent < total; sent += size {
			var err error
			if states {
				_, err = fmt.Fprintf(w, "event: state\ndata: {\"state\":\"working\",\"detail\":{\"n\":%d}}\n\n", sent)
			} else {
				_, err = fmt.Fprintf(w, "event: delta\ndata: {\"text\":%q}\n\n", chunk)
			}
			if err == nil {
				err = rc.Flush()
			}
			if err != nil || r.Context().Err() != nil {
				closed <- true
				return
			}
		}
		fmt.Fprint(w, "event: done\ndata: {}\n\n")
		closed <- false
	}))
	t.Cleanup(srv.Close)
	return srv, closed
}

// An agent that streams past the run's output bound fails the run with
// output_too_large, its request is closed, and what is recorded stays
// within the bound (issue 8: 400 MB streamed took the server to 2.4 GB).
func TestRunOutputIsBounded(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		for name, tc := range map[string]struct {
			opts   Options
			states bool
			limit  string
		}{
			"bytes":  {opts: Options{MaxOutputBytes: 16 << 10}, limit: "AGENTPLANE_MAX_RUN_OUTPUT_BYTES"},
			"events": {opts: Options{MaxOutputEvents: 25}, states: true, limit: "AGENTPLANE_MAX_RUN_EVENTS"},
		} {
			t.Run(name, func(t *testing.T) {
				st := testdb.Open(t, dialect)
				ag, closed := floodAgent(t, 1000, 8<<20, tc.states)
				m := newTestManager(t, st, tc.opts, "a", ag.URL)
				started, err := m.StartRun(context.Background(), StartParams{UserID: "u", AgentID: "a", Message: agent.Message{Role: "user", Content: "hi"}})
				if err != nil {
					t.Fatal(err)
				}
				r := waitEnded(t, st, started.Run.RunID)
				var e struct{ Code, Message string }
				json.Unmarshal(r.Error, &e)
				if r.Status != store.RunFailed || e.Code != "output_too_large" || !strings.Contains(e.Message, tc.limit) {
					t.Fatalf("run ended %s %s", r.Status, r.Error)
				}
				select {
				case c := <-closed:
					if !c {
						t.Fatal("the agent sent everything: its request was not closed")
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the agent's request is still open")
				}
				bytes, events := 0, 0
				for _, ev := range runEvents(t, st, r.RunID) {
					switch ev.Type {
					case eventlog.TypeAgentStreamDelta:
						var d struct{ Text string }
						json.Unmarshal(ev.Payload, &d)
						bytes += len(d.Text)
						events++
					case eventlog.TypeState:
						bytes += len(ev.Payload)
						events++
					}
				}
				if tc.opts.MaxOutputBytes > 0 && (bytes > int(tc.opts.MaxOutputBytes) || bytes < int(tc.opts.MaxOutputBytes)-1000) {
					t.Fatalf("recorded %d bytes of output, bound %d", bytes, tc.opts.MaxOutputBytes)
				}
				if tc.opts.MaxOutputEvents > 0 && events != tc.opts.MaxOutputEvents {
					t.Fatalf("recorded %d events of output, bound %d", events, tc.opts.MaxOutputEvents)
				}
			})
		}
	})
}

// sseAgentPaced is a real HTTP agent that writes each event on its own,
// flushed, gap apart.
func sseAgentPaced(t *testing.T, gap time.Duration, events ...string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range events {
			if i > 0 {
				time.Sleep(gap)
			}
			fmt.Fprint(w, ev)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// An agent's streamed output waits (up to StreamLinger) for more to share
// its commit, and the run's end takes what waits along at once: with a
// linger no test outwaits, deltas written 20 ms apart and the run's end
// are one commit; with none, each delta is a commit of its own.
func TestStreamedOutputSharesACommit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		for _, c := range []struct {
			linger      time.Duration
			wantCommits int64
		}{{time.Hour, 1}, {time.Nanosecond, 5}} {
			st := testdb.Open(t, dialect)
			agentSrv := sseAgentPaced(t, 20*time.Millisecond,
				"event: delta\ndata: {\"text\":\"a\"}\n\n", "event: delta\ndata: {\"text\":\"b\"}\n\n",
				"event: delta\ndata: {\"text\":\"c\"}\n\n", "event: delta\ndata: {\"text\":\"d\"}\n\n",
				"event: done\ndata: {}\n\n")
			m := newTestManager(t, st, Options{StreamLinger: c.linger}, "ag", agentSrv.URL)
			ctx := context.Background()
			started, err := m.StartRun(ctx, StartParams{UserID: "u", SessionID: "s_" + fmt.Sprint(c.wantCommits), AgentID: "ag", Message: agent.Message{Role: "user", Content: "hi"}})
			if err != nil {
				t.Fatal(err)
			}
			_, before := m.log.Stats()
			// Published after the commit is counted: once the run's end
			// arrives here, Stats has every commit of it.
			sub := m.log.Subscribe(started.Run.SessionID, started.Events[len(started.Events)-1].Seq)
			defer sub.Close()
			wait, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			for ended := false; !ended; {
				evs, err := sub.Next(wait)
				if err != nil {
					t.Fatalf("linger %v: waiting for the run's end: %v", c.linger, err)
				}
				for _, e := range evs {
					ended = ended || eventlog.IsRunEnd(e.Type)
				}
			}
			_, after := m.log.Stats()
			r := waitEnded(t, st, started.Run.RunID)
			if r.Status != store.RunDone {
				t.Fatalf("linger %v: run %s", c.linger, r.Status)
			}
			var text strings.Builder
			for _, e := range runEvents(t, st, r.RunID) {
				if e.Type == eventlog.TypeAgentStreamDelta {
					var p struct{ Text string }
					_ = json.Unmarshal(e.Payload, &p)
					text.WriteString(p.Text)
				}
			}
			if text.String() != "abcd" {
				t.Fatalf("linger %v: deltas %q, want abcd", c.linger, text.String())
			}
			// The four deltas and the end (with no linger the end has a
			// commit of its own, unless the last delta's is still open).
			if got := after - before; (c.wantCommits == 1 && got != 1) || (c.wantCommits > 1 && got < 4) {
				t.Fatalf("linger %v: the output and the end took %d commits, want %d", c.linger, got, c.wantCommits)
			}
		}
	})
}
