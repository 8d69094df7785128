package sqlstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/agentplane/agentplane/internal/store"
)

// appendMany appends events of several sessions on PostgreSQL without
// waiting for anything: the counters' bump (one UPDATE per chunk of
// sessions) and then the inserts (one per chunk of events), which number
// their rows from the counters just bumped. Inside a pipelined transaction
// all of it goes with the commit. It used to wait for the bump's answer
// before sending the inserts: two round trips per commit of a delivery
// batch, whose events are many sessions' (issue 13).
//
// The bump takes every session's row lock before any row is written, as
// before; an insert reads the counters after the bump, in the same
// transaction, so it sees the bumped values and no one else can move them.
// A session that does not exist gives its rows a NULL seq, which the
// column refuses: an error of the statement itself, as a pipelined commit
// needs (rowLater). The events' seqs are filled in when the bump's row is
// read, by the commit at the latest (store.Queries.EventsAppend).
func (q *queries) appendMany(ctx context.Context, events []store.EventParams) ([]store.Event, error) {
	counts := make(map[string]int64, 16)
	var order []string
	for i := range events {
		s := events[i].SessionID
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	out := make([]store.Event, len(events))
	// Each event's seq is its ordinal among its session's (from 1) until
	// the counters are read (outside a pipe: at once); the insert numbers
	// it as the counter minus after[i], how many of its session's come
	// after it.
	k := make(map[string]int64, len(counts))
	after := make([]int64, len(events))
	for i := range events {
		s := events[i].SessionID
		k[s]++
		out[i] = newEvent(&events[i], k[s])
		after[i] = counts[s] - k[s]
	}
	last := make(map[string]int64, len(counts))
	for start, size := range shapeChunks(len(order), seqUpdateChunk) {
		// By id: the statement's counters come back in this order (COLLATE
		// "C": by bytes), and its VALUES list the rows in one order for
		// every transaction.
		sessions := slices.Clone(order[start : start+size])
		slices.Sort(sessions)
		args := make([]any, 0, 2*size)
		for _, s := range sessions {
			args = append(args, s, counts[s])
		}
		err := q.rowLater(ctx, bumpSeqsTexts.get(size, buildBumpSeqs), args, func(r *row) error {
			var lasts string
			if err := r.Scan(&lasts); err != nil {
				return fmt.Errorf("allocate seqs: %w", err)
			}
			if err := readLasts(lasts, sessions, last); err != nil {
				return err
			}
			if len(last) == len(counts) { // the last bump's row: every counter is known
				for i := range out {
					s := out[i].SessionID
					out[i].Seq += last[s] - counts[s]
				}
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	for start, size := range shapeChunks(len(out), eventInsertChunk) {
		args := make([]any, 0, 8*size)
		var sessions, runs, parents, types repeats
		for i := start; i < start+size; i++ {
			e := &out[i]
			args = append(args, e.EventID, sessions.box(e.SessionID), after[i], runs.box(e.RunID), parents.box(e.ParentRunID), e.TS,
				types.box(e.Type), unsafe.String(unsafe.SliceData(e.Payload), len(e.Payload)))
		}
		if err := q.execLater(ctx, numberedInsertTexts.get(size, buildNumberedInsert), args...); err != nil {
			return nil, fmt.Errorf("insert %d events: %w", size, err)
		}
	}
	return out, nil
}

// readLasts reads the bump's comma-separated counters, one per session of
// sessions in their order, into last. A session without a counter does
// not exist: ErrNotFound.
func readLasts(lasts string, sessions []string, last map[string]int64) error {
	for i, s := range sessions {
		num, rest, more := strings.Cut(lasts, ",")
		if num == "" || more != (i < len(sessions)-1) {
			return fmt.Errorf("allocate seqs: counters %q for %d sessions: %w", lasts, len(sessions), store.ErrNotFound)
		}
		v, err := strconv.ParseInt(num, 10, 64)
		if err != nil {
			return fmt.Errorf("allocate seqs: %w", err)
		}
		last[s] = v
		lasts = rest
	}
	return nil
}

// bumpSeqsTexts holds the bump's statements by number of sessions (a size
// shapeChunks makes: the texts are few).
var bumpSeqsTexts texts[int]

// buildBumpSeqs advances the counters of sessions sessions, each by its
// count, and returns their new values ordered by session id.
func buildBumpSeqs(sessions int) string {
	var b strings.Builder
	b.WriteString(`WITH u AS (UPDATE sessions SET last_seq = last_seq + v.column2 FROM (VALUES `)
	for i := range sessions {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(CAST(? AS TEXT), CAST(? AS BIGINT))")
	}
	b.WriteString(`) AS v WHERE sessions.session_id = v.column1 RETURNING sessions.session_id, sessions.last_seq) `)
	b.WriteString(`SELECT COALESCE(string_agg(CAST(u.last_seq AS TEXT), ',' ORDER BY u.session_id COLLATE "C"), '') FROM u`)
	return b.String()
}

// numberedInsertTexts holds appendMany's inserts by row count.
var numberedInsertTexts texts[int]

// buildNumberedInsert inserts n events, each numbered as its session's
// counter minus r, the number of its session's events appended after it.
func buildNumberedInsert(n int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO events (` + eventCols + `) SELECT v.event_id, v.session_id, s.last_seq - v.r, v.run_id, v.parent_run_id, v.ts, v.type, v.payload FROM (VALUES `)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT))")
	}
	b.WriteString(`) AS v (event_id, session_id, r, run_id, parent_run_id, ts, type, payload) LEFT JOIN sessions s ON s.session_id = v.session_id`)
	return b.String()
}
