package retention

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(daysAgo float64, now time.Time) int64 {
	return now.Add(-time.Duration(daysAgo * float64(24*time.Hour))).UnixMilli()
}

// session makes a session of agent with one run started and (unless
// active) ended at, with some events and messages.
func session(t *testing.T, s store.Store, agent string, at int64, active bool) string {
	t.Helper()
	ctx := context.Background()
	sid, rid := ids.New("ses"), ids.New("run")
	if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: at - 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: rid, SessionID: sid, AgentID: agent, UserID: "u", Owner: "i", StartedAt: at - 5}); err != nil {
		t.Fatal(err)
	}
	var evs []store.EventParams
	for i := range 7 {
		evs = append(evs, store.EventParams{SessionID: sid, RunID: rid, TS: at - 5 + int64(i%3), Type: "t", Payload: json.RawMessage(`{}`)})
	}
	if _, err := s.EventsAppend(ctx, evs); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, RunID: rid, Role: "user", Content: "x", CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	if !active {
		if _, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: rid, From: store.RunActiveStatuses, Status: store.RunDone, At: at}); err != nil {
			t.Fatal(err)
		}
	}
	return sid
}

func counts(t *testing.T, s store.Store) string {
	t.Helper()
	out := ""
	for _, table := range []string{"sessions", "runs", "events", "messages"} {
		out += fmt.Sprintf("%s=%d ", table, testdb.Count(t, s, `SELECT COUNT(*) FROM `+table))
	}
	return out
}

func exists(t *testing.T, s store.Store, sid string) bool {
	_, err := s.SessionGet(context.Background(), sid)
	return err == nil
}

// The sweeper deletes exactly the sessions past their retention — never
// one with an active run, however old; an agent's override keeps its
// sessions longer (or shorter) — and records each deletion in the audit
// log with its counts.
func TestSweepDeletesOnlyExpiredSessions(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		now := t0
		old := session(t, s, "a", ms(40, now), false)
		young := session(t, s, "a", ms(10, now), false)
		activeOld := session(t, s, "a", ms(90, now), true)
		keptLonger := session(t, s, "keeper", ms(40, now), false) // keeper: 60 days
		goneSooner := session(t, s, "brief", ms(5, now), false)   // brief: 3 days
		before := counts(t, s)
		if before != "sessions=5 runs=5 events=35 messages=5 " {
			t.Fatalf("before: %s", before)
		}
		var told []string
		sw := New(s, Options{Days: 30, Agents: map[string]int{"keeper": 60, "brief": 3}, BatchSize: 4, PerSweep: 2, Owner: "p", Now: func() time.Time { return now },
			Deleted: func(id string) { told = append(told, id) }})
		deleted := 0
		for range 4 { // PerSweep 2: the walk takes several sweeps
			res, err := sw.Sweep(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			deleted += res.Sessions
		}
		if deleted != 2 || exists(t, s, old) || exists(t, s, goneSooner) || !exists(t, s, young) || !exists(t, s, activeOld) || !exists(t, s, keptLonger) {
			t.Fatalf("deleted %d; old %v young %v activeOld %v keptLonger %v goneSooner %v", deleted,
				exists(t, s, old), exists(t, s, young), exists(t, s, activeOld), exists(t, s, keptLonger), exists(t, s, goneSooner))
		}
		if slices.Sort(told); !slices.Equal(told, slices.Sorted(slices.Values([]string{old, goneSooner}))) {
			t.Fatalf("told of %v, want the two deleted", told)
		}
		if after := counts(t, s); after != "sessions=3 runs=3 events=21 messages=3 " {
			t.Fatalf("after: %s (before %s)", after, before)
		}
		rows, err := s.AuditList(context.Background(), &store.AuditListParams{Action: audit.SessionPurge, Limit: 10})
		if err != nil || len(rows) != 2 || rows[0].Actor != audit.Retention {
			t.Fatalf("audit = %v, %v", rows, err)
		}
		var d struct {
			Deleted map[string]int `json:"deleted"`
		}
		if json.Unmarshal(rows[0].Detail, &d) != nil || d.Deleted["events"] != 7 || d.Deleted["runs"] != 1 || d.Deleted["messages"] != 1 {
			t.Fatalf("audit detail = %s", rows[0].Detail)
		}
		// Off: a sweeper without periods deletes nothing.
		if res, err := New(s, Options{Now: func() time.Time { return now.Add(1000 * 24 * time.Hour) }}).Sweep(context.Background()); err != nil || res.Sessions != 0 {
			t.Fatalf("disabled sweep = %+v, %v", res, err)
		}
	})
}

// A deletion cut short (its process died after deciding it) is finished by
// a later sweep once its record is stale, even with retention off; Delete
// refuses a session with an active run.
func TestDeleteAndResume(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		now := t0
		clock := func() time.Time { return now }
		ctx := context.Background()
		active := session(t, s, "a", ms(1, now), true)
		sw := New(s, Options{Owner: "p", Now: clock})
		if _, err := sw.Delete(audit.WithActor(ctx, audit.Admin), active, nil); err != ErrActive {
			t.Fatalf("delete an active session: %v", err)
		}
		cut := session(t, s, "a", ms(1, now), false)
		if err := s.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: cut, Owner: "dead", At: now.UnixMilli()}); err != nil {
			t.Fatal(err)
		}
		if res, _ := sw.Sweep(ctx); res.Sessions != 0 {
			t.Fatal("a fresh purge record was taken over")
		}
		now = now.Add(6 * time.Minute)
		res, err := sw.Sweep(ctx)
		if err != nil || res.Sessions != 1 || exists(t, s, cut) || !exists(t, s, active) {
			t.Fatalf("resume = %+v, %v", res, err)
		}
		got, err := sw.Delete(audit.WithActor(ctx, audit.Admin), session(t, s, "a", ms(0, now), false), map[string]any{"force": false})
		if err != nil || got["events"] != 7 {
			t.Fatalf("delete = %v, %v", got, err)
		}
	})
}

// An agent's run-less session loses its old events from the oldest, and
// stays.
func TestAgentSessionEventsArePruned(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		now := t0
		ctx := context.Background()
		sid := "agent:bot"
		if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, CreatedAt: ms(100, now)}); err != nil {
			t.Fatal(err)
		}
		var evs []store.EventParams
		for _, d := range []float64{50, 45, 40, 2, 1} {
			evs = append(evs, store.EventParams{SessionID: sid, TS: ms(d, now), Type: "llm_call_done", Payload: json.RawMessage(`{}`)})
		}
		if _, err := s.EventsAppend(ctx, evs); err != nil {
			t.Fatal(err)
		}
		sw := New(s, Options{Days: 30, BatchSize: 2, Owner: "p", Now: func() time.Time { return now }, AgentSessionPrefix: "agent:"})
		res, err := sw.Sweep(ctx)
		if err != nil || res.Rows["events"] != 3 || !exists(t, s, sid) {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
		if n := testdb.Count(t, s, `SELECT COUNT(*) FROM events`); n != 2 {
			t.Fatalf("%d events left", n)
		}
	})
}

// A period longer than a time.Duration holds saturates instead of wrapping:
// from 106,752 days time.Duration(days)*24h overflowed negative, the cutoff
// landed in the future and every ended session was deleted (an external
// audit: days 200000 purged a fresh session, an agent's 999999 a 31-day-old
// one). A negative period, which the config refuses, deletes nothing.
func TestHugePeriodsNeverWrap(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		now := t0
		ctx := context.Background()
		fresh := session(t, s, "a", ms(1, now), false)
		keeper := session(t, s, "ag1", ms(31, now), false)
		old := session(t, s, "a", ms(40, now), false)
		if _, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: "agent:ag1", CreatedAt: ms(100, now)}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.EventsAppend(ctx, []store.EventParams{{SessionID: "agent:ag1", TS: ms(2, now), Type: "llm_call_done", Payload: json.RawMessage(`{}`)}}); err != nil {
			t.Fatal(err)
		}
		clock := func() time.Time { return now }
		for name, opts := range map[string]Options{
			"days":     {Days: 200000},
			"max int":  {Days: math.MaxInt},
			"agent":    {Days: 30, Agents: map[string]int{"ag1": 999999, "a": 999999}},
			"negative": {Days: -1, Agents: map[string]int{"ag1": -5}},
		} {
			opts.Owner, opts.Now, opts.AgentSessionPrefix = "p", clock, "agent:"
			res, err := New(s, opts).Sweep(ctx)
			if err != nil || res.Sessions != 0 || res.Rows["events"] != 0 || !exists(t, s, fresh) || !exists(t, s, keeper) || !exists(t, s, old) {
				t.Fatalf("%s: sweep = %+v, %v; fresh %v keeper %v old %v", name, res, err, exists(t, s, fresh), exists(t, s, keeper), exists(t, s, old))
			}
		}
		// The longest period still deletes what is older than the others ask.
		res, err := New(s, Options{Days: 30, Agents: map[string]int{"ag1": 999999}, Owner: "p", Now: clock}).Sweep(ctx)
		if err != nil || res.Sessions != 1 || exists(t, s, old) || !exists(t, s, keeper) || !exists(t, s, fresh) {
			t.Fatalf("sweep = %+v, %v", res, err)
		}
	})
}

func TestPeriodSaturates(t *testing.T) {
	for days, want := range map[int]time.Duration{
		0: 0, -3: 0, 1: day, 30: 30 * day, maxDays: time.Duration(maxDays) * day,
		maxDays + 1: math.MaxInt64, 200000: math.MaxInt64, math.MaxInt: math.MaxInt64,
	} {
		if got := period(days); got != want || got < 0 {
			t.Errorf("period(%d) = %v, want %v", days, got, want)
		}
	}
}
