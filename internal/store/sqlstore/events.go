package sqlstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
)

const eventCols = `event_id, session_id, seq, run_id, parent_run_id, ts, type, payload`

// eventInsertChunk bounds the rows of one multi-row INSERT (8 parameters
// each) well below both databases' parameter limits.
const eventInsertChunk = 256

// EventsAppend allocates each session's next seqs and inserts the events.
// The seq counter is bumped with one guarded UPDATE per session inside the
// same transaction as the insert: the row lock it takes serialises writers
// of a session across processes, so seqs never gap or commit out of order.
func (q *queries) EventsAppend(ctx context.Context, events []store.EventParams) ([]store.Event, error) {
	if len(events) == 0 {
		return nil, nil
	}
	counts := make(map[string]int64, 4)
	var order []string
	for i := range events {
		s := events[i].SessionID
		if counts[s] == 0 {
			order = append(order, s)
		}
		counts[s]++
	}
	next := make(map[string]int64, len(order))
	for _, s := range order {
		var last int64
		err := q.queryRow(ctx, true, `UPDATE sessions SET last_seq = last_seq + ? WHERE session_id = ? RETURNING last_seq`, counts[s], s).Scan(&last)
		if err != nil {
			return nil, fmt.Errorf("allocate seq for session %s: %w", s, mapErr(q.d, err))
		}
		next[s] = last - counts[s] + 1
	}
	out := make([]store.Event, len(events))
	for i := range events {
		p := &events[i]
		payload := p.Payload
		if len(payload) == 0 {
			payload = []byte("{}")
		}
		out[i] = store.Event{
			EventID: ids.New("evt"), SessionID: p.SessionID, Seq: next[p.SessionID],
			RunID: p.RunID, ParentRunID: p.ParentRunID, TS: p.TS, Type: p.Type, Payload: payload,
		}
		next[p.SessionID]++
	}
	for start := 0; start < len(out); start += eventInsertChunk {
		end := min(start+eventInsertChunk, len(out))
		var b strings.Builder
		b.WriteString(`INSERT INTO events (` + eventCols + `) VALUES `)
		args := make([]any, 0, (end-start)*8)
		for i := start; i < end; i++ {
			if i > start {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?, ?, ?, ?, ?, ?)")
			e := &out[i]
			args = append(args, e.EventID, e.SessionID, e.Seq, e.RunID, e.ParentRunID, e.TS, e.Type, string(e.Payload))
		}
		if _, err := q.exec(ctx, b.String(), args...); err != nil {
			return nil, fmt.Errorf("insert %d events: %w", end-start, err)
		}
	}
	return out, nil
}

// EventsList pages a session's or a run's events in seq order.
func (q *queries) EventsList(ctx context.Context, p *store.EventsListParams) ([]store.Event, error) {
	limit := p.Limit
	if limit <= 0 || limit > 10000 {
		limit = 1000
	}
	var query string
	var args []any
	switch {
	case p.SessionID != "":
		query = `SELECT ` + eventCols + ` FROM events WHERE session_id = ? AND seq > ?`
		args = []any{p.SessionID, p.AfterSeq}
		if p.RunID != "" {
			query += ` AND run_id = ?`
			args = append(args, p.RunID)
		}
	case p.RunID != "":
		query = `SELECT ` + eventCols + ` FROM events WHERE run_id = ? AND seq > ?`
		args = []any{p.RunID, p.AfterSeq}
	default:
		return nil, fmt.Errorf("list events: session or run id required")
	}
	if p.Type != "" {
		query += ` AND type = ?`
		args = append(args, p.Type)
	}
	query += ` ORDER BY seq LIMIT ?`
	args = append(args, limit)
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	out := make([]store.Event, 0, 16)
	for rows.Next() {
		var e store.Event
		if err := rows.Scan(&e.EventID, &e.SessionID, &e.Seq, &e.RunID, &e.ParentRunID, &e.TS, &e.Type, nullJSON{&e.Payload}); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
