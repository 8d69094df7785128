package sqlstore

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/internal/store"
)

// keyset appends a listing's cursor condition and its ORDER BY … LIMIT ?
// (the caller appends the limit): rows strictly after the cursor in
// (keyCol, idCol) order. Keyset paging, unlike OFFSET, never repeats or
// skips a row when rows are inserted between two pages.
func keyset(query string, args []any, keyCol, idCol string, after *store.Cursor, desc bool) (string, []any) {
	op, dir := ">", "ASC"
	if desc {
		op, dir = "<", "DESC"
	}
	if after != nil {
		query += ` AND (` + keyCol + ` ` + op + ` ? OR (` + keyCol + ` = ? AND ` + idCol + ` ` + op + ` ?))`
		args = append(args, after.Key, after.Key, after.ID)
	}
	return query + ` ORDER BY ` + keyCol + ` ` + dir + `, ` + idCol + ` ` + dir + ` LIMIT ?`, args
}

// SessionList lists sessions newest first with their activity. The
// per-session figures are correlated subqueries on indexed columns (the
// last event by (session_id, seq), runs by (session_id, started_at)), so a
// page costs a few index probes per row however long the sessions are.
func (q *queries) SessionList(ctx context.Context, p *store.SessionListParams) ([]*store.SessionSummary, error) {
	const active = `EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.session_id AND r.ended_at IS NULL)`
	query := `SELECT ` + q.sessionCols() + `,
		COALESCE((SELECT e.ts FROM events e WHERE e.session_id = s.session_id ORDER BY e.seq DESC LIMIT 1), 0),
		` + active + `,
		(SELECT COUNT(*) FROM runs r WHERE r.session_id = s.session_id AND r.parent_run_id = '')
		FROM sessions s WHERE 1 = 1`
	var args []any
	if p.UserID != "" {
		query += ` AND s.user_id = ?`
		args = append(args, p.UserID)
	}
	if p.AgentID != "" {
		query += ` AND EXISTS (SELECT 1 FROM runs r WHERE r.session_id = s.session_id AND r.agent_id = ?)`
		args = append(args, p.AgentID)
	}
	switch p.Status {
	case store.SessionActive:
		query += ` AND ` + active
	case store.SessionEnded:
		query += ` AND NOT ` + active
	}
	if p.IDPrefix != "" {
		query += ` AND substr(s.session_id, 1, ?) = ?`
		args = append(args, len(p.IDPrefix), p.IDPrefix)
	}
	if p.Since > 0 {
		query += ` AND s.created_at >= ?`
		args = append(args, p.Since)
	}
	if p.Until > 0 {
		query += ` AND s.created_at < ?`
		args = append(args, p.Until)
	}
	query, args = keyset(query, args, "s.created_at", "s.session_id", p.After, true)
	args = append(args, listLimit(p.Limit))
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	defer rows.Close()
	out := []*store.SessionSummary{}
	byID := map[string]*store.SessionSummary{}
	for rows.Next() {
		var s store.SessionSummary
		var isActive bool
		if err := rows.Scan(&s.SessionID, &s.UserID, &s.CreatedAt, &s.LastSeq, nullJSON{&s.Metadata},
			&s.LastEventAt, &isActive, &s.RootRuns); err != nil {
			return nil, fmt.Errorf("list sessions: %w", err)
		}
		s.Status = store.SessionEnded
		if isActive {
			s.Status = store.SessionActive
		}
		s.Agents = []string{}
		out = append(out, &s)
		byID[s.SessionID] = &s
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sessions: %w", mapErr(q.d, err))
	}
	rows.Close()
	if len(out) == 0 {
		return out, nil
	}
	// The agents of the page's sessions, in one query.
	ids := make([]any, len(out))
	for i, s := range out {
		ids[i] = s.SessionID
	}
	arows, err := q.query(ctx, `SELECT session_id, agent_id, MIN(started_at) AS first FROM runs
		WHERE session_id IN (`+placeholders(len(ids))+`) GROUP BY session_id, agent_id ORDER BY first, agent_id`, ids...)
	if err != nil {
		return nil, fmt.Errorf("list session agents: %w", err)
	}
	defer arows.Close()
	for arows.Next() {
		var sid, agentID string
		var first int64
		if err := arows.Scan(&sid, &agentID, &first); err != nil {
			return nil, fmt.Errorf("list session agents: %w", err)
		}
		if s := byID[sid]; s != nil {
			s.Agents = append(s.Agents, agentID)
		}
	}
	return out, arows.Err()
}

// RunList lists runs by the filters of GET /v1/runs.
func (q *queries) RunList(ctx context.Context, p *store.RunListParams) ([]*store.Run, error) {
	query := `SELECT ` + runCols + ` FROM runs WHERE 1 = 1`
	var args []any
	for _, f := range []struct{ col, val string }{
		{"session_id", p.SessionID}, {"user_id", p.UserID}, {"agent_id", p.AgentID}, {"parent_run_id", p.ParentRunID},
	} {
		if f.val != "" {
			query += ` AND ` + f.col + ` = ?`
			args = append(args, f.val)
		}
	}
	if p.RootOnly {
		query += ` AND parent_run_id = ''`
	}
	if len(p.Statuses) > 0 {
		query += ` AND status IN (` + placeholders(len(p.Statuses)) + `)`
		for _, s := range p.Statuses {
			args = append(args, s)
		}
	}
	if p.Since > 0 {
		query += ` AND started_at >= ?`
		args = append(args, p.Since)
	}
	if p.Until > 0 {
		query += ` AND started_at < ?`
		args = append(args, p.Until)
	}
	query, args = keyset(query, args, "started_at", "run_id", p.After, !p.Asc)
	args = append(args, listLimit(p.Limit))
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("list runs: %w", err)
	}
	defer rows.Close()
	out := []*store.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, fmt.Errorf("list runs: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// AgentListPage lists agents by id after afterID.
func (q *queries) AgentListPage(ctx context.Context, afterID string, limit int) ([]*store.Agent, error) {
	rows, err := q.query(ctx, `SELECT `+agentCols+` FROM agents WHERE agent_id > ? ORDER BY agent_id LIMIT ?`, afterID, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list agents: %w", err)
	}
	defer rows.Close()
	out := []*store.Agent{}
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, fmt.Errorf("list agents: %w", err)
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// ToolListPage lists tools by name after afterName.
func (q *queries) ToolListPage(ctx context.Context, afterName string, limit int) ([]*store.ToolRow, error) {
	rows, err := q.query(ctx, `SELECT `+toolCols+` FROM tools WHERE tool_name > ? ORDER BY tool_name LIMIT ?`, afterName, listLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	defer rows.Close()
	out := []*store.ToolRow{}
	for rows.Next() {
		t, err := scanTool(rows)
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// UsageSummary aggregates llm_call_done events in SQL. Payloads are TEXT
// on PostgreSQL (0004_text_columns.sql): read as json, which accepts any
// JSON text, unlike jsonb. The type test is a
// literal so both databases use the partial index events_llm_done (ts),
// and only the LLM calls of the period are read, not the session logs.
func (q *queries) UsageSummary(ctx context.Context, p *store.UsageParams) ([]store.UsageRow, error) {
	field := func(name, cast string) string {
		if q.d.Name == "postgres" {
			return `COALESCE((e.payload::json->>'` + name + `')::` + cast + `, 0)`
		}
		return `COALESCE(json_extract(e.payload, '$.` + name + `'), 0)`
	}
	var key string
	var args []any
	switch p.GroupBy {
	case store.UsageByModel:
		if q.d.Name == "postgres" {
			key = `COALESCE(e.payload::json->>'model', '')`
		} else {
			key = `COALESCE(json_extract(e.payload, '$.model'), '')`
		}
	case store.UsageByUser:
		key = `COALESCE(r.user_id, s.user_id, '')`
	case store.UsageByAgent:
		// A call outside a run is recorded in its agent's own session.
		key = `COALESCE(r.agent_id, CASE WHEN substr(e.session_id, 1, ?) = ? THEN substr(e.session_id, ?) ELSE '' END)`
		args = append(args, len(p.AgentSessionPrefix), p.AgentSessionPrefix, len(p.AgentSessionPrefix)+1)
	default:
		return nil, fmt.Errorf("usage: unknown grouping %q", p.GroupBy)
	}
	query := `SELECT ` + key + ` AS k, COUNT(*),
		SUM(` + field("prompt_tokens", "bigint") + `), SUM(` + field("completion_tokens", "bigint") + `),
		SUM(` + field("cached_tokens", "bigint") + `), SUM(` + field("reasoning_tokens", "bigint") + `),
		SUM(` + field("total_tokens", "bigint") + `), SUM(` + field("estimated_cost", "float8") + `)
		FROM events e
		LEFT JOIN runs r ON r.run_id = e.run_id AND e.run_id <> ''
		LEFT JOIN sessions s ON s.session_id = e.session_id
		WHERE e.type = 'llm_call_done'`
	if p.Since > 0 {
		query += ` AND e.ts >= ?`
		args = append(args, p.Since)
	}
	if p.Until > 0 {
		query += ` AND e.ts < ?`
		args = append(args, p.Until)
	}
	query += ` GROUP BY k ORDER BY k`
	rows, err := q.query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("usage: %w", err)
	}
	defer rows.Close()
	out := []store.UsageRow{}
	for rows.Next() {
		var u store.UsageRow
		if err := rows.Scan(&u.Key, &u.LLMCalls, &u.PromptTokens, &u.CompletionTokens, &u.CachedTokens,
			&u.ReasoningTokens, &u.TotalTokens, &u.EstimatedCost); err != nil {
			return nil, fmt.Errorf("usage: %w", err)
		}
		out = append(out, u)
	}
	return out, rows.Err()
}
