package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
	"github.com/agentplane/agentplane/internal/testdb"
)

func session(t *testing.T, st store.Store) string {
	t.Helper()
	id := ids.New("ses")
	if _, err := st.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: id, UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return id
}

func ev(sid, typ string, n int) store.EventParams {
	return store.EventParams{SessionID: sid, Type: typ, TS: time.Now().UnixMilli(), Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n))}
}

// holdWriter keeps l's writer inside a transaction until the returned
// release is called, so that what is submitted meanwhile is taken by the
// next commit as one batch.
func holdWriter(t *testing.T, l *Log, sid string) (release func()) {
	t.Helper()
	ch := make(chan struct{})
	holding := make(chan struct{})
	go l.Do(context.Background(), sid, func(context.Context, store.Queries) ([]store.EventParams, error) {
		close(holding)
		<-ch
		return nil, nil
	})
	<-holding
	return func() { close(ch) }
}

// collect reads n events from sub, checking each batch is already committed.
func collect(t *testing.T, st store.Store, sub *Subscription, n int) []store.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var got []store.Event
	for len(got) < n {
		evs, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d events: %v", len(got), n, err)
		}
		// Delivered means durable: the rows must already be readable.
		stored, err := st.EventsList(ctx, &store.EventsListParams{SessionID: evs[0].SessionID, AfterSeq: evs[0].Seq - 1, Limit: len(evs)})
		if err != nil {
			t.Fatalf("read back: %v", err)
		}
		if len(stored) != len(evs) {
			t.Fatalf("%d events delivered, only %d readable from the store", len(evs), len(stored))
		}
		for i := range evs {
			if stored[i].EventID != evs[i].EventID {
				t.Fatalf("event seq %d delivered before it was readable from the store", evs[i].Seq)
			}
		}
		got = append(got, evs...)
	}
	return got
}

func assertConsecutive(t *testing.T, evs []store.Event, from int64) {
	t.Helper()
	for i, e := range evs {
		if e.Seq != from+int64(i) {
			t.Fatalf("event %d has seq %d, want %d", i, e.Seq, from+int64(i))
		}
	}
}

func TestReplayThenLiveExactlyOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)
		for i := range 10 {
			if _, err := l.Append(ctx, ev(sid, "a", i)); err != nil {
				t.Fatal(err)
			}
		}
		sub := l.Subscribe(sid, 4)
		defer sub.Close()
		// Live appends race with the catch-up read; nothing may be lost or doubled.
		go func() {
			for i := 10; i < 200; i++ {
				_ = l.AppendAsync(ctx, nil, ev(sid, "b", i))
			}
		}()
		got := collect(t, st, sub, 196)
		assertConsecutive(t, got, 5)
		if len(got) != 196 {
			t.Fatalf("got %d events", len(got))
		}
	})
}

func TestManySessionsConcurrent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		const sessions, each = 20, 50
		var wg sync.WaitGroup
		for range sessions {
			sid := session(t, st)
			sub := l.Subscribe(sid, 0)
			wg.Add(2)
			go func() {
				defer wg.Done()
				for i := range each {
					if err := l.AppendAsync(ctx, nil, ev(sid, "d", i)); err != nil {
						t.Error(err)
					}
				}
			}()
			go func() {
				defer wg.Done()
				defer sub.Close()
				got := collect(t, st, sub, each)
				assertConsecutive(t, got, 1)
				for i, e := range got {
					var p struct{ N int }
					json.Unmarshal(e.Payload, &p)
					if p.N != i {
						t.Errorf("event %d carries n=%d: submission order lost", i, p.N)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}

func TestDoFailureWritesNothingAndSparesTheBatch(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)
		boom := errors.New("boom")
		var wg sync.WaitGroup
		errs := make([]error, 40)
		for i := range 40 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = l.Do(ctx, sid, func(ctx context.Context, tx store.Queries) ([]store.EventParams, error) {
					if i%4 == 0 {
						// A real statement before the failure: it must be rolled back.
						if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, Role: "x", Content: "must vanish"}); err != nil {
							return nil, err
						}
						return nil, boom
					}
					return []store.EventParams{ev(sid, "ok", i)}, nil
				})
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if i%4 == 0 && !errors.Is(err, boom) {
				t.Fatalf("op %d: %v, want boom", i, err)
			}
			if i%4 != 0 && err != nil {
				t.Fatalf("op %d failed with its neighbour: %v", i, err)
			}
		}
		evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if len(evs) != 30 {
			t.Fatalf("%d events, want 30", len(evs))
		}
		assertConsecutive(t, evs, 1)
		msgs, _ := st.MessagesList(ctx, &store.MessagesListParams{SessionID: sid})
		if len(msgs) != 0 {
			t.Fatalf("failed ops left %d messages", len(msgs))
		}
	})
}

func TestSlowSubscriberCatchesUpFromStore(t *testing.T) {
	st := testdb.Open(t, "sqlite")
	l := New(st, Options{})
	defer l.Stop()
	ctx := context.Background()
	sid := session(t, st)
	sub := l.Subscribe(sid, 0)
	defer sub.Close()
	// More than the live buffer holds, while nobody reads.
	n := liveBufferLimit + 500
	batch := make([]store.EventParams, 0, 100)
	for i := range n {
		batch = append(batch, ev(sid, "d", i))
		if len(batch) == cap(batch) || i == n-1 {
			if _, err := l.Append(ctx, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	got := collect(t, st, sub, n)
	assertConsecutive(t, got, 1)
}

func TestStopFlushesQueuedAppends(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		ctx := context.Background()
		sid := session(t, st)
		for i := range 300 {
			if err := l.AppendAsync(ctx, nil, ev(sid, "d", i)); err != nil {
				t.Fatal(err)
			}
		}
		l.Stop()
		l.Stop()
		if _, err := l.Append(ctx, ev(sid, "late", 0)); !errors.Is(err, ErrClosed) {
			t.Fatalf("append after stop: %v", err)
		}
		evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if len(evs) != 300 {
			t.Fatalf("%d of 300 queued events survived Stop", len(evs))
		}
	})
}

func TestPokeDeliversEventsWrittenElsewhere(t *testing.T) {
	st := testdb.Open(t, "sqlite")
	l := New(st, Options{})
	defer l.Stop()
	sid := session(t, st)
	sub := l.Subscribe(sid, 0)
	defer sub.Close()
	// Another process writes straight to the store; only a poke tells us.
	if _, err := st.EventsAppend(context.Background(), []store.EventParams{ev(sid, "x", 1), ev(sid, "x", 2)}); err != nil {
		t.Fatal(err)
	}
	l.Hub().Poke(sid)
	got := collect(t, st, sub, 2)
	assertConsecutive(t, got, 1)
}

// Events appended IfRunActive are dropped at commit once their run has
// ended — here by another connection, as another replica would — and the
// session's seqs stay gap-free. On PostgreSQL the runs are asserted active
// with the transaction's other statements instead of asked about first
// (one round trip fewer); when one has ended, the transaction fails and
// runs again, asking first. SQLite asks first every time.
func TestIfRunActiveDropsOutputOfEndedRuns(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		checks := countRunChecks(t, st)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)
		r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "elsewhere", StartedAt: 1})
		if err != nil {
			t.Fatal(err)
		}
		delta := func(n int) store.EventParams {
			e := ev(sid, "agent_stream_delta", n)
			e.RunID, e.IfRunActive = r.RunID, true
			return e
		}
		if _, err := l.Append(ctx, delta(1), delta(2)); err != nil {
			t.Fatal(err)
		}
		want := map[string][2]int{"sqlite": {0, 1}, "postgres": {1, 0}}[dialect]
		if got := checks(); got != want {
			t.Fatalf("while the run is active: %d assertions and %d reads of ended runs, want %v", got[0], got[1], want)
		}
		if _, err := st.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 2}); err != nil {
			t.Fatal(err)
		}
		got, err := l.Append(ctx, delta(3), ev(sid, "unconditional", 4))
		if err != nil || len(got) != 1 || got[0].Type != "unconditional" {
			t.Fatalf("append after the end: %v %v", got, err)
		}
		want = map[string][2]int{"sqlite": {0, 2}, "postgres": {2, 1}}[dialect] // the failed assertion, then asking
		if got := checks(); got != want {
			t.Fatalf("after the end: %d assertions and %d reads of ended runs, want %v", got[0], got[1], want)
		}
		evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if len(evs) != 3 {
			t.Fatalf("%d events stored, want 3 (the late delta dropped)", len(evs))
		}
		assertConsecutive(t, evs, 1)
	})
}

// countRunChecks counts the statements st runs that check runs are active:
// assertions (agentplane_runs_active) and reads of which have ended.
func countRunChecks(t *testing.T, st store.Store) func() [2]int {
	t.Helper()
	db, ok := st.(*sqlstore.DB)
	if !ok {
		t.Fatal("the store is not a *sqlstore.DB")
	}
	var mu sync.Mutex
	var n [2]int
	db.ObserveQueries(func(q string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case strings.Contains(q, "agentplane_runs_active"):
			n[0]++
		case strings.Contains(q, "FROM runs WHERE run_id IN"):
			n[1]++
		}
	})
	return func() [2]int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// Write-behind appends wait for company and share one commit; any other op
// ends the wait at once and joins them; Stop does not wait out the linger.
func TestAppendBehindSharesACommit(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		// A linger no test machine outwaits: only the Append below (or
		// Stop) can end it.
		l := New(st, Options{BehindLinger: time.Minute})
		ctx := context.Background()
		sid := session(t, st)
		for i := range 50 {
			if err := l.AppendBehind(ctx, nil, ev(sid, "llm", i)); err != nil {
				t.Fatal(err)
			}
		}
		start := time.Now()
		out, err := l.Append(ctx, ev(sid, "state", 50))
		if err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited > 30*time.Second {
			t.Fatalf("the append waited %v: it sat out the linger", waited)
		}
		if out[0].Seq != 51 {
			t.Fatalf("the append got seq %d, want 51 (after the 50 queued before it)", out[0].Seq)
		}
		if evs, commits := l.Stats(); evs != 51 || commits != 1 {
			t.Fatalf("%d events in %d commits, want 51 in 1", evs, commits)
		}

		// Alone, they commit when Stop flushes, not after the linger.
		for i := range 5 {
			if err := l.AppendBehind(ctx, nil, ev(sid, "llm", 100+i)); err != nil {
				t.Fatal(err)
			}
		}
		start = time.Now()
		l.Stop()
		if waited := time.Since(start); waited > 30*time.Second {
			t.Fatalf("Stop waited %v: it sat out the linger", waited)
		}
		evs, _ := st.EventsList(ctx, &store.EventsListParams{SessionID: sid})
		if len(evs) != 56 {
			t.Fatalf("%d of 56 events stored", len(evs))
		}
	})
}

// Without other traffic a write-behind append commits once its linger is
// over.
func TestAppendBehindCommitsAfterTheLinger(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{BehindLinger: 20 * time.Millisecond})
		defer l.Stop()
		sid := session(t, st)
		sub := l.Subscribe(sid, 0)
		defer sub.Close()
		if err := l.AppendBehind(context.Background(), nil, ev(sid, "llm", 1)); err != nil {
			t.Fatal(err)
		}
		got := collect(t, st, sub, 1)
		if got[0].Type != "llm" {
			t.Fatalf("got %+v", got)
		}
	})
}

// By default a lone write-behind append (an LLM call's record) waits the
// 50 ms of DefaultBehindLinger for company before it commits: at 1,000
// calls/s that shares a commit's fixed cost ~50 ways (issue 13). Load can
// only make the commit later, so the lower bound is what is checked.
func TestAppendBehindDefaultLingerIs50ms(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		sid := session(t, st)
		committed := make(chan time.Duration, 1)
		start := time.Now()
		if err := l.AppendBehind(context.Background(), func(_ []store.Event, err error) {
			if err != nil {
				t.Error(err)
			}
			committed <- time.Since(start)
		}, ev(sid, "llm", 1)); err != nil {
			t.Fatal(err)
		}
		select {
		case d := <-committed:
			if d < 45*time.Millisecond {
				t.Fatalf("a lone write-behind append committed after %v, want it to linger ~50 ms", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the write-behind append never committed")
		}
		if _, commits := l.Stats(); commits != 1 {
			t.Fatalf("%d commits, want 1", commits)
		}
	})
}

// listCounter counts the store reads of event listings.
type listCounter struct {
	store.Store
	lists atomic.Int64
}

func (c *listCounter) EventsList(ctx context.Context, p *store.EventsListParams) ([]store.Event, error) {
	c.lists.Add(1)
	return c.Store.EventsList(ctx, p)
}

// A live subscription made before the events it follows are committed
// delivers them, and what follows, exactly once and without reading the
// store; events of the session committed before its start are not
// delivered, and a gap (another process's events) is still read.
func TestSubscribeLiveDeliversWithoutReadingBack(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		raw := testdb.Open(t, dialect)
		st := &listCounter{Store: raw}
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, raw)
		if _, err := l.Append(ctx, ev(sid, "earlier", 0), ev(sid, "earlier", 1)); err != nil {
			t.Fatal(err)
		}
		sub := l.SubscribeLive(sid)
		defer sub.Close()
		if _, err := l.Append(ctx, ev(sid, "other run", 2)); err != nil { // committed after subscribing, before the run starts
			t.Fatal(err)
		}
		mine, err := l.Append(ctx, ev(sid, "run started", 3), ev(sid, "run input", 4))
		if err != nil {
			t.Fatal(err)
		}
		sub.StartAfter(mine[0].Seq - 1)
		go func() {
			for i := 5; i < 100; i++ {
				_ = l.AppendAsync(ctx, nil, ev(sid, "output", i))
			}
		}()
		got := collect(t, raw, sub, 97)
		assertConsecutive(t, got, mine[0].Seq)
		if got[0].Type != "run started" || len(got) != 97 {
			t.Fatalf("first delivered %q, %d events", got[0].Type, len(got))
		}
		if n := st.lists.Load(); n != 0 {
			t.Fatalf("the subscription read the store %d times", n)
		}
		// Another process's events: only a poke tells, and they are read.
		if _, err := raw.EventsAppend(ctx, []store.EventParams{ev(sid, "elsewhere", 1), ev(sid, "elsewhere", 2)}); err != nil {
			t.Fatal(err)
		}
		l.Hub().Poke(sid)
		more := collect(t, raw, sub, 2)
		assertConsecutive(t, more, got[len(got)-1].Seq+1)
		if st.lists.Load() == 0 {
			t.Fatal("the poke's events were not read from the store")
		}
	})
}

// A batch of write-behind appends commits when the first of them has
// waited as long as it may, not when the one that came first has: a
// stream's delta (a short linger) that joins an LLM call's event (the
// long default) is not held for the LLM event's linger.
func TestAppendBehindShortestLingerWins(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		// A default linger no test machine outwaits: only the delta's own
		// linger can end the batch's wait.
		l := New(st, Options{BehindLinger: time.Minute})
		defer l.Stop()
		ctx := context.Background()
		sid := session(t, st)
		sub := l.Subscribe(sid, 0)
		defer sub.Close()
		if err := l.AppendBehind(ctx, nil, ev(sid, "llm", 1)); err != nil {
			t.Fatal(err)
		}
		if err := l.AppendBehindIn(ctx, nil, time.Millisecond, nil, ev(sid, "delta", 2)); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got := collect(t, st, sub, 2)
		if waited := time.Since(start); waited > 30*time.Second {
			t.Fatalf("the delta waited %v: it sat out the first event's linger", waited)
		}
		if got[0].Type != "llm" || got[1].Type != "delta" {
			t.Fatalf("got %+v", got)
		}
		if _, commits := l.Stats(); commits != 1 {
			t.Fatalf("%d commits, want the two events in 1", commits)
		}
	})
}

// endsCounter counts the RunsEnded statements of a transaction.
type endsCounter struct {
	store.Queries
	asked []int
}

func (c *endsCounter) RunsEnded(ctx context.Context, runIDs []string) (map[string]bool, error) {
	c.asked = append(c.asked, len(runIDs))
	return c.Queries.RunsEnded(ctx, runIDs)
}

// A batch's runs are asked about in one statement per 256, filled up to a
// power of two with the last run (11 runs: one statement of 16, not three
// of 8, 2 and 1), and what it finds is right: the ended runs, and only
// them.
func TestEndedRunsAskedInOneStatement(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		ctx := context.Background()
		for _, c := range []struct {
			runs int
			want []int
		}{{1, []int{1}}, {11, []int{16}}, {256, []int{256}}, {300, []int{256, 64}}} {
			var batch []*op
			wantEnded := map[string]bool{}
			for i := range c.runs {
				sid := session(t, st) // one active root run per session
				r, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: ids.New("run"), SessionID: sid, AgentID: "a", Owner: "i", StartedAt: 1})
				if err != nil {
					t.Fatal(err)
				}
				if i%3 == 1 || i == c.runs-1 { // the last, whose id fills the statement up, too
					if _, err := st.RunTransition(ctx, &store.RunTransitionParams{RunID: r.RunID, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 2}); err != nil {
						t.Fatal(err)
					}
					wantEnded[r.RunID] = true
				}
				e := ev(sid, "agent_stream_delta", i)
				e.RunID, e.IfRunActive = r.RunID, true
				batch = append(batch, &op{events: []store.EventParams{e}})
			}
			var got map[string]bool
			var counted *endsCounter
			err := st.InTx(ctx, func(tx store.Queries) (err error) {
				counted = &endsCounter{Queries: tx}
				got, err = endedRuns(ctx, counted, batch)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(counted.asked) != fmt.Sprint(c.want) {
				t.Fatalf("%d runs asked about in statements of %v, want %v", c.runs, counted.asked, c.want)
			}
			if len(got) != len(wantEnded) {
				t.Fatalf("%d runs: %d ended found, want %d", c.runs, len(got), len(wantEnded))
			}
			for id := range wantEnded {
				if !got[id] {
					t.Fatalf("%d runs: ended run %s not found", c.runs, id)
				}
			}
		}
	})
}

// Ops that share a commit each get exactly their own events back, in
// order, and a slice an op is handed can be appended to without touching
// another op's events (they are handed runs of one shared array).
func TestBatchedOpsGetTheirOwnEvents(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		st := testdb.Open(t, dialect)
		l := New(st, Options{})
		defer l.Stop()
		ctx := context.Background()
		a, b := session(t, st), session(t, st)
		release := holdWriter(t, l, a)
		const ops = 6
		var wg sync.WaitGroup
		got := make([][]store.Event, ops)
		for i := range ops {
			sid := a
			if i%2 == 1 {
				sid = b
			}
			evs := []store.EventParams{ev(sid, "x", 10*i), ev(sid, "x", 10*i+1)}
			if i%3 == 0 {
				evs = evs[:1]
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := l.Append(ctx, evs...)
				if err != nil {
					t.Error(err)
					return
				}
				got[i] = out
			}()
		}
		waitQueued(t, l, ops)
		release()
		wg.Wait()
		if _, commits := l.Stats(); commits > 2 {
			t.Fatalf("%d commits: the ops were not batched", commits)
		}
		for i, out := range got {
			want := 2
			if i%3 == 0 {
				want = 1
			}
			if len(out) != want {
				t.Fatalf("op %d got %d events, want %d", i, len(out), want)
			}
			for j, e := range out {
				if string(e.Payload) != fmt.Sprintf(`{"n":%d}`, 10*i+j) {
					t.Fatalf("op %d event %d is %s", i, j, e.Payload)
				}
			}
			got[i] = append(out, store.Event{Type: "appended by the caller"})
		}
		for i, out := range got {
			if out[0].Type != "x" || (len(out) > 1 && out[len(out)-2].Type != "x") {
				t.Fatalf("op %d's events were overwritten by a neighbour's append: %+v", i, out)
			}
		}
	})
}
