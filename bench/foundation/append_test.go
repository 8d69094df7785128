package main

// Sustained event appends per second on each store (issue 2), in one run,
// over 10, 1,000 and 10,000 sessions (issue 13: the rate must not fall with
// the number of sessions):
//
//	go test -run '^$' -bench Append -benchtime 5s ./bench/foundation
//
//	async   eventlog.Log.AppendAsync from 200 goroutines over the sessions:
//	        what a streaming run does with each delta (group commit)
//	sync    eventlog.Log.Append (waits for the commit) from the same goroutines
//	raw     the baseline: store.EventsAppend with one event per call, one
//	        transaction each, from the same goroutines (no group commit)
//
// Each reports events/s, events/commit and the benchmark process's CPU time
// per event (SQLite's work included, PostgreSQL's server not); ratio = async
// (or sync) ÷ raw.
// PostgreSQL uses AGENTPLANE_TEST_POSTGRES (default as internal/testdb) and
// is skipped when unreachable. SQLite files live in the test's temporary
// directory (TMPDIR): put it on the disk you deploy on, as fsync is the cost.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// appendWriters is like the 200 streaming runs of the latency benchmark.
const appendWriters = 200

// appendSessionCounts is the sessions matrix.
var appendSessionCounts = []int{10, 1000, 10000}

// countingStore counts write transactions, to report events per commit.
type countingStore struct {
	store.Store
	txs atomic.Int64
}

func (c *countingStore) InTx(ctx context.Context, fn func(tx store.Queries) error) error {
	c.txs.Add(1)
	return c.Store.InTx(ctx, fn)
}

func (c *countingStore) EventsAppend(ctx context.Context, events []store.EventParams) ([]store.Event, error) {
	c.txs.Add(1) // the store wraps a lone append in its own transaction
	return c.Store.EventsAppend(ctx, events)
}

func BenchmarkAppend(b *testing.B) {
	for _, dialect := range testdb.Dialects {
		for _, appendSessions := range appendSessionCounts {
			b.Run(fmt.Sprintf("%s/sessions=%d", dialect, appendSessions), func(b *testing.B) {
				benchmarkAppend(b, dialect, appendSessions)
			})
		}
	}
}

func benchmarkAppend(b *testing.B, dialect string, appendSessions int) {
	st := &countingStore{Store: testdb.Open(b, dialect)}
	ctx := context.Background()
	sessions := make([]string, appendSessions)
	runs := make([]string, appendSessions)
	// One transaction for all sessions: 10,000 fsyncs would take
	// longer than the measurement.
	err := st.Store.InTx(ctx, func(tx store.Queries) error {
		for i := range sessions {
			sessions[i], runs[i] = ids.New("ses"), ids.New("run")
			if _, err := tx.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sessions[i], UserID: "bench", CreatedAt: time.Now().UnixMilli()}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	// appendEach runs submit for b.N events spread over the writers,
	// each writer cycling through its own share of the sessions.
	appendEach := func(b *testing.B, submit func(i int, e store.EventParams)) {
		var next atomic.Int64
		b.SetParallelism((appendWriters + gomaxprocs() - 1) / gomaxprocs())
		b.RunParallel(func(pb *testing.PB) {
			w := int(next.Add(1) - 1)
			for k := 0; pb.Next(); k++ {
				s := (w + k*appendWriters) % appendSessions
				submit(s, delta(sessions[s], runs[s], k))
			}
		})
	}
	report := func(b *testing.B, txs0 int64, cpu0 time.Duration) {
		secs := b.Elapsed().Seconds()
		b.ReportMetric(float64(b.N)/secs, "events/s")
		b.ReportMetric(float64(processCPU()-cpu0)/float64(time.Microsecond)/float64(b.N), "cpu-µs/event")
		if txs := st.txs.Load() - txs0; txs > 0 {
			b.ReportMetric(float64(b.N)/float64(txs), "events/commit")
		}
	}

	b.Run("async", func(b *testing.B) {
		l := eventlog.New(st, eventlog.Options{Logger: quiet})
		defer l.Stop()
		var wg sync.WaitGroup
		var failed atomic.Int64
		done := func(_ []store.Event, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		}
		txs0, cpu0 := st.txs.Load(), processCPU()
		b.ResetTimer()
		appendEach(b, func(_ int, e store.EventParams) {
			wg.Add(1)
			if err := l.AppendAsync(ctx, done, e); err != nil {
				failed.Add(1)
				wg.Done()
			}
		})
		wg.Wait() // every event committed before the clock stops
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d appends failed", n)
		}
		report(b, txs0, cpu0)
	})

	b.Run("sync", func(b *testing.B) {
		l := eventlog.New(st, eventlog.Options{Logger: quiet})
		defer l.Stop()
		var failed atomic.Int64
		txs0, cpu0 := st.txs.Load(), processCPU()
		b.ResetTimer()
		appendEach(b, func(_ int, e store.EventParams) {
			if _, err := l.Append(ctx, e); err != nil {
				failed.Add(1)
			}
		})
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d appends failed", n)
		}
		report(b, txs0, cpu0)
	})

	b.Run("raw-batch1", func(b *testing.B) {
		var failed atomic.Int64
		txs0, cpu0 := st.txs.Load(), processCPU()
		b.ResetTimer()
		appendEach(b, func(_ int, e store.EventParams) {
			if _, err := st.EventsAppend(ctx, []store.EventParams{e}); err != nil {
				failed.Add(1)
			}
		})
		b.StopTimer()
		if n := failed.Load(); n > 0 {
			b.Fatalf("%d appends failed", n)
		}
		report(b, txs0, cpu0)
	})
}

// delta is an agent_stream_delta like a streaming run logs.
func delta(sessionID, runID string, k int) store.EventParams {
	payload, _ := json.Marshal(map[string]string{"text": fmt.Sprintf("token %d lorem ipsum", k)})
	return store.EventParams{SessionID: sessionID, RunID: runID, TS: time.Now().UnixMilli(), Type: eventlog.TypeAgentStreamDelta, Payload: payload}
}

func gomaxprocs() int { return runtime.GOMAXPROCS(0) }

// processCPU is this process's user+system CPU time (PostgreSQL's own work
// is not in it; SQLite's is).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
