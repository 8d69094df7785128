package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/sqlstore"
)

// memoFixture is a store with a session and an active run in it.
type memoFixture struct {
	db       *sqlstore.DB
	dt       *direct
	path     string
	sid, rid string
}

func newMemoFixture(t *testing.T) *memoFixture {
	t.Helper()
	db, dt, path := openDirect(t)
	f := &memoFixture{db: db, dt: dt, path: path}
	f.sid, f.rid = f.sessionWithRun(t, db)
	return f
}

func (f *memoFixture) sessionWithRun(t *testing.T, st store.Store) (sid, rid string) {
	t.Helper()
	ctx := context.Background()
	sid, rid = ids.New("ses"), ids.New("run")
	if _, err := st.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u", CreatedAt: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.RunInsert(ctx, &store.RunInsertParams{RunID: rid, SessionID: sid, AgentID: "a", Owner: "i", StartedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return sid, rid
}

// appendDeltas appends n stream deltas of the run to the session in one
// transaction of st and returns their seqs.
func appendDeltas(t *testing.T, st store.Store, sid, rid string, n int) []int64 {
	t.Helper()
	var seqs []int64
	err := st.InTx(context.Background(), func(tx store.Queries) error {
		evs := make([]store.EventParams, n)
		for i := range evs {
			evs[i] = store.EventParams{SessionID: sid, RunID: rid, TS: 1, Type: "agent_stream_delta", Payload: json.RawMessage(`{"text":"x"}`)}
		}
		out, err := tx.EventsAppend(context.Background(), evs)
		for _, e := range out {
			seqs = append(seqs, e.Seq)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return seqs
}

// wantSeqs fails unless got is from, from+1, …
func wantSeqs(t *testing.T, got []int64, from int64) {
	t.Helper()
	for i, s := range got {
		if s != from+int64(i) {
			t.Fatalf("seqs %v, want them from %d", got, from)
		}
	}
}

func runsEnded(t *testing.T, st store.Store, runIDs ...string) map[string]bool {
	t.Helper()
	var got map[string]bool
	err := st.InTx(context.Background(), func(tx store.Queries) (err error) {
		got, err = tx.RunsEnded(context.Background(), runIDs)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func endRun(t *testing.T, st store.Store, rid string) {
	t.Helper()
	if _, err := st.RunTransition(context.Background(), &store.RunTransitionParams{RunID: rid, From: store.RunActiveStatuses, Status: store.RunCancelled, At: 2}); err != nil {
		t.Fatal(err)
	}
}

// Once the writer has appended to a session and seen a run active, the
// event log's next commits ask the database about neither: the seqs go on
// from the memo, the run is known active (issue 13: those two reads were
// a sixth of the server's CPU at 200 streams).
func TestMemoAnswersTheEventLogsReads(t *testing.T) {
	f := newMemoFixture(t)
	var asked atomic.Int64
	f.db.ObserveQueries(func(q string) {
		if strings.Contains(q, "FROM sessions s WHERE") || strings.Contains(q, "FROM runs WHERE run_id IN") {
			asked.Add(1)
		}
	})
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 3), 1)
	if got := runsEnded(t, f.db, f.rid); len(got) != 0 {
		t.Fatalf("active run reported ended: %v", got)
	}
	if asked.Load() != 2 {
		t.Fatalf("%d reads of sessions and runs for a first append and check, want 2", asked.Load())
	}
	if f.dt.memo == nil {
		t.Fatal("the writer connection has no memo")
	}
	hits0, _ := f.dt.memo.Counts()
	for i := range 10 {
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), int64(4+2*i))
		if got := runsEnded(t, f.db, f.rid, f.rid); len(got) != 0 {
			t.Fatalf("active run reported ended: %v", got)
		}
	}
	if asked.Load() != 2 {
		t.Fatalf("%d reads of sessions and runs after ten more commits, want still 2", asked.Load())
	}
	if hits, _ := f.dt.memo.Counts(); hits-hits0 != 20 {
		t.Fatalf("%d answers from the memo, want 20", hits-hits0)
	}
}

// wantRunEnded fails unless st reports f's run ended, or active.
func (f *memoFixture) wantRunEnded(t *testing.T, st store.Store, ended bool) {
	t.Helper()
	if got := runsEnded(t, st, f.rid); got[f.rid] != ended {
		t.Fatalf("run reported ended %v, want %v", got[f.rid], ended)
	}
}

// endIn ends f's run inside tx.
func (f *memoFixture) endIn(tx store.Queries) error {
	_, err := tx.RunTransition(context.Background(), &store.RunTransitionParams{RunID: f.rid, From: store.RunActiveStatuses, Status: store.RunDone, At: 2})
	return err
}

// A run ended on the writer's connection — by the store's transition, in
// a transaction of its own or one that also appends — is reported ended
// at once; one whose end rolled back stays active.
func TestMemoSeesARunEnd(t *testing.T) {
	t.Run("transition", func(t *testing.T) {
		f := newMemoFixture(t)
		f.wantRunEnded(t, f.db, false)
		endRun(t, f.db, f.rid)
		f.wantRunEnded(t, f.db, true)
	})
	t.Run("same transaction", func(t *testing.T) {
		f := newMemoFixture(t)
		f.wantRunEnded(t, f.db, false)
		err := f.db.InTx(context.Background(), func(tx store.Queries) error {
			if got, err := tx.RunsEnded(context.Background(), []string{f.rid}); err != nil || len(got) != 0 {
				return fmt.Errorf("before the end: %v, %v", got, err)
			}
			if err := f.endIn(tx); err != nil {
				return err
			}
			if got, err := tx.RunsEnded(context.Background(), []string{f.rid}); err != nil || !got[f.rid] {
				return fmt.Errorf("after the end: %v, %v", got, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		f.wantRunEnded(t, f.db, true)
	})
	t.Run("rolled back", func(t *testing.T) {
		f := newMemoFixture(t)
		f.wantRunEnded(t, f.db, false)
		errNo := errors.New("no")
		err := f.db.InTx(context.Background(), func(tx store.Queries) error {
			if err := f.endIn(tx); err != nil {
				return err
			}
			return errNo
		})
		if !errors.Is(err, errNo) {
			t.Fatal(err)
		}
		f.wantRunEnded(t, f.db, false) // its end rolled back
		endRun(t, f.db, f.rid)
		f.wantRunEnded(t, f.db, true)
	})
	t.Run("deleted", func(t *testing.T) {
		f := newMemoFixture(t)
		f.wantRunEnded(t, f.db, false)
		if _, err := f.db.SQL().Exec(`DELETE FROM runs WHERE run_id = ?`, f.rid); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.SQL().Exec(`INSERT INTO runs (run_id, session_id, agent_id, status, owner, started_at, ended_at) VALUES (?, ?, 'a', 'FAILED', 'i', 1, 2)`, f.rid, f.sid); err != nil {
			t.Fatal(err)
		}
		f.wantRunEnded(t, f.db, true)
	})
}

// A transaction that appended and rolled back leaves no trace in the
// seqs: the next append numbers on from the last committed one.
func TestMemoDropsARolledBackAppend(t *testing.T) {
	f := newMemoFixture(t)
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
	errNo := errors.New("no")
	err := f.db.InTx(context.Background(), func(tx store.Queries) error {
		if _, err := tx.EventsAppend(context.Background(), []store.EventParams{{SessionID: f.sid, TS: 1, Type: "x", Payload: json.RawMessage(`{}`)}}); err != nil {
			return err
		}
		return errNo
	})
	if !errors.Is(err, errNo) {
		t.Fatal(err)
	}
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 3)
	// Two appends in one transaction number on from each other.
	err = f.db.InTx(context.Background(), func(tx store.Queries) error {
		for want := int64(5); want <= 6; want++ {
			out, err := tx.EventsAppend(context.Background(), []store.EventParams{{SessionID: f.sid, TS: 1, Type: "x", Payload: json.RawMessage(`{}`)}})
			if err != nil {
				return err
			}
			if out[0].Seq != want {
				return fmt.Errorf("seq %d, want %d", out[0].Seq, want)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// What changes a session's numbering behind EventsAppend's back — its
// counter raised (retention does), the session deleted and made again
// under its id, an event inserted by another statement — is seen.
func TestMemoSeesASessionChange(t *testing.T) {
	t.Run("counter raised", func(t *testing.T) {
		f := newMemoFixture(t)
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
		if _, err := f.db.SQL().Exec(`UPDATE sessions SET last_seq = 100 WHERE session_id = ?`, f.sid); err != nil {
			t.Fatal(err)
		}
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 101)
	})
	t.Run("deleted and made again", func(t *testing.T) {
		f := newMemoFixture(t)
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
		for _, q := range []string{`DELETE FROM events WHERE session_id = ?`, `DELETE FROM runs WHERE session_id = ?`, `DELETE FROM sessions WHERE session_id = ?`} {
			if _, err := f.db.SQL().Exec(q, f.sid); err != nil {
				t.Fatal(err)
			}
		}
		err := f.db.InTx(context.Background(), func(tx store.Queries) error {
			_, err := tx.EventsAppend(context.Background(), []store.EventParams{{SessionID: f.sid, TS: 1, Type: "x", Payload: json.RawMessage(`{}`)}})
			return err
		})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("append to a deleted session: %v, want ErrNotFound", err)
		}
		if _, err := f.db.SessionCreate(context.Background(), &store.SessionCreateParams{SessionID: f.sid, UserID: "u", CreatedAt: 3}); err != nil {
			t.Fatal(err)
		}
		if _, err := f.db.RunInsert(context.Background(), &store.RunInsertParams{RunID: f.rid, SessionID: f.sid, AgentID: "a", Owner: "i", StartedAt: 3}); err != nil {
			t.Fatal(err)
		}
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
	})
	t.Run("event inserted by another statement", func(t *testing.T) {
		f := newMemoFixture(t)
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
		if _, err := f.db.SQL().Exec(`INSERT INTO events (event_id, session_id, seq, run_id, parent_run_id, ts, type, payload) VALUES (?, ?, 3, '', '', 1, 'x', '{}')`, ids.New("evt"), f.sid); err != nil {
			t.Fatal(err)
		}
		wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 4)
	})
}

// Another connection's commits — another process on the same file — are
// seen: appends to a session the memo knows, a run's end.
func TestMemoSeesAnotherConnection(t *testing.T) {
	f := newMemoFixture(t)
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 1)
	f.wantRunEnded(t, f.db, false)
	other, err := Open(context.Background(), f.path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	wantSeqs(t, appendDeltas(t, other, f.sid, f.rid, 2), 3)
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 5)
	endRun(t, other, f.rid)
	f.wantRunEnded(t, f.db, true)
}

// The server's own background checkpoint, on a reader connection, is not
// a commit: the memo survives it (else it would start over every 250 ms).
func TestMemoSurvivesACheckpoint(t *testing.T) {
	f := newMemoFixture(t)
	appendDeltas(t, f.db, f.sid, f.rid, 50)
	reader, err := sql.Open("sqlite", sqliteDSN(f.path, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	if frames, err := passive(context.Background(), reader); err != nil || frames == 0 {
		t.Fatalf("checkpoint: %d frames, %v", frames, err)
	}
	hits0, misses0 := f.dt.memo.Counts()
	wantSeqs(t, appendDeltas(t, f.db, f.sid, f.rid, 2), 51)
	if hits, misses := f.dt.memo.Counts(); hits-hits0 != 1 || misses != misses0 {
		t.Fatalf("after a checkpoint: %d hits, %d misses, want 1 and 0", hits-hits0, misses-misses0)
	}
}
