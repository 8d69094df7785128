// Package retention deletes old sessions (DESIGN §15): a sweeper that, on
// every replica, finds sessions whose runs have all ended and whose last
// activity is older than the retention period (retention.days, or the
// longest override of the session's agents) and deletes every row of them
// — events, transcript, runs, tool calls, approvals — in
// small batches, each its own short statement, so SQLite's single writer
// is never held for long. The same deletion serves DELETE
// /v1/sessions/{id}. Each deletion is one audit row with its counts.
//
// A deletion is first decided in a transaction that holds the session's
// row and finds no active or queued run, and recorded (session_purges): a
// run cannot start in the session from then on, and a deletion cut short
// by a crash is finished by any replica's sweeper.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/internal/audit"
	"github.com/agentplane/agentplane/internal/store"
)

// Options configure a Sweeper.
type Options struct {
	// Days keeps sessions this long after their last activity; 0 keeps
	// them forever (unless an agent override applies). A negative value
	// is taken as 0, and one longer than a time.Duration holds (about 292
	// years) as that long.
	Days int
	// Agents overrides Days for sessions with runs of these agents; a
	// session with several agents is kept as long as the longest of them
	// asks (an agent without an override asks for Days, forever when 0).
	// Values are bounded as Days is.
	Agents map[string]int
	// Interval paces the sweeps (default 1 min); BatchSize is the rows one
	// statement deletes (default 500); PerSweep bounds the sessions one
	// sweep looks at (default 200).
	Interval  time.Duration
	BatchSize int
	PerSweep  int
	// Owner names this process in purge records.
	Owner  string
	Logger *slog.Logger
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// AgentSessionPrefix names sessions holding an agent's run-less
	// events (run.AgentSessionPrefix): they never end, so their events are
	// pruned from the oldest instead of the session being deleted.
	AgentSessionPrefix string
	// Deleted is told of each session this process finished deleting, to
	// drop what it holds of it in memory (run.Manager.ForgetSession).
	Deleted func(sessionID string)
}

// staleAfter is how long a purge may go untouched before another process
// finishes it.
const staleAfter = 5 * time.Minute

// TombstoneTTL is how long a deleted session's id stays refused: a client
// still following the old session must not be handed a new one under the
// same id (its cursor would skip the new events).
const TombstoneTTL = 30 * 24 * time.Hour

// Sweeper deletes expired sessions.
type Sweeper struct {
	st   store.Store
	opts Options

	// cursor is where the next sweep continues its walk through old
	// sessions; it starts over when it reaches the end.
	cursor store.SessionListByAgeParams

	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// New makes a sweeper; call Start.
func New(st store.Store, opts Options) *Sweeper {
	if opts.Interval <= 0 {
		opts.Interval = time.Minute
	}
	if opts.BatchSize <= 0 {
		opts.BatchSize = 500
	}
	if opts.PerSweep <= 0 {
		opts.PerSweep = 200
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	// A negative period would put the cutoff in the future and delete
	// every ended session; the config refuses one, and so, here, does
	// the safe reading of it: keep.
	opts.Days = max(opts.Days, 0)
	if len(opts.Agents) > 0 {
		agents := make(map[string]int, len(opts.Agents))
		for a, d := range opts.Agents {
			agents[a] = max(d, 0)
		}
		opts.Agents = agents
	}
	return &Sweeper{st: st, opts: opts}
}

// Enabled reports whether any retention period is set (purges cut short
// are finished either way).
func (s *Sweeper) Enabled() bool { return s.opts.Days > 0 || len(s.opts.Agents) > 0 }

// Start sweeps every Interval until Stop.
func (s *Sweeper) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.opts.Interval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if _, err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
					s.opts.Logger.Warn("retention sweep failed", "err", err)
				}
			}
		}
	}()
}

// Stop ends the sweeps; safe to call more than once.
func (s *Sweeper) Stop() {
	s.stopOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
			<-s.done
		}
	})
}

// Result is what a sweep or a deletion removed.
type Result struct {
	Sessions int                      `json:"sessions"`
	Rows     store.SessionPurgeCounts `json:"rows"`
}

func (r *Result) add(c store.SessionPurgeCounts) {
	if r.Rows == nil {
		r.Rows = store.SessionPurgeCounts{}
	}
	for k, v := range c {
		r.Rows[k] += v
	}
}

// keepDays is how long a session with runs of agents is kept: 0 = forever.
func (s *Sweeper) keepDays(agents []string) int {
	days := s.opts.Days
	if len(agents) == 0 {
		return days
	}
	keep := 0
	for _, a := range agents {
		d, ok := s.opts.Agents[a]
		if !ok {
			d = s.opts.Days
		}
		if d == 0 {
			return 0 // this agent's sessions are kept forever
		}
		keep = max(keep, d)
	}
	return keep
}

// shortest is the shortest retention configured: no session younger can
// be due.
func (s *Sweeper) shortest() int {
	m := s.opts.Days
	for _, d := range s.opts.Agents {
		if d > 0 && (m == 0 || d < m) {
			m = d
		}
	}
	return m
}

const day = 24 * time.Hour

// maxDays is the longest period a time.Duration holds, in whole days
// (106,751: about 292 years).
const maxDays = int(math.MaxInt64 / int64(day))

// period is days as a duration, saturated: time.Duration(days) * day
// overflows from 106,752 days and wraps negative, which put the cutoff in
// the future and deleted every ended session (found by an external audit:
// days 200000; an agent's 999999). A longer period is as long as any
// session can have been idle.
func period(days int) time.Duration {
	if days > maxDays {
		return math.MaxInt64
	}
	return time.Duration(max(days, 0)) * day
}

// Sweep finishes purges cut short, then looks at up to PerSweep old
// sessions and deletes those that are due. It returns what it deleted.
func (s *Sweeper) Sweep(ctx context.Context) (*Result, error) {
	res := &Result{Rows: store.SessionPurgeCounts{}}
	now := s.opts.Now()
	stale, err := s.st.SessionPurgesStale(ctx, now.Add(-staleAfter).UnixMilli(), 20)
	if err != nil {
		return res, err
	}
	for _, p := range stale {
		if err := s.st.SessionPurgeClaim(ctx, p, s.opts.Owner, now.UnixMilli()); errors.Is(err, store.ErrConflict) {
			continue // another process took it
		} else if err != nil {
			return res, err
		}
		s.opts.Logger.Info("finishing a session deletion cut short", "session_id", p.SessionID, "was_owner", p.Owner)
		counts, err := s.purge(ctx, p.SessionID, audit.Retention, map[string]any{"resumed": true, "reason": p.Reason})
		if err != nil {
			return res, err
		}
		res.Sessions++
		res.add(counts)
	}
	if _, err := s.st.SessionTombstonesPrune(ctx, now.Add(-TombstoneTTL).UnixMilli()); err != nil {
		return res, err
	}
	if !s.Enabled() {
		return res, nil
	}
	shortest := s.shortest()
	s.cursor.Before = now.Add(-period(shortest)).UnixMilli()
	s.cursor.Limit = s.opts.PerSweep
	page, err := s.st.SessionListByAge(ctx, &s.cursor)
	if err != nil {
		return res, err
	}
	if len(page) < s.cursor.Limit {
		s.cursor.AfterCreated, s.cursor.AfterID = 0, "" // the next sweep starts over
	} else {
		last := page[len(page)-1]
		s.cursor.AfterCreated, s.cursor.AfterID = last.CreatedAt, last.SessionID
	}
	for _, sess := range page {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		if s.opts.AgentSessionPrefix != "" && strings.HasPrefix(sess.SessionID, s.opts.AgentSessionPrefix) {
			if err := s.pruneAgentSession(ctx, sess.SessionID, now, res); err != nil {
				return res, err
			}
			continue
		}
		a, err := s.st.SessionActivityGet(ctx, sess.SessionID)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return res, err
		}
		days := s.keepDays(a.Agents)
		cutoff := now.Add(-period(days)).UnixMilli()
		if days == 0 || a.Active || a.LastActivity >= cutoff {
			continue
		}
		err = s.st.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: sess.SessionID, IdleBefore: cutoff, Owner: s.opts.Owner, Reason: "retention", At: now.UnixMilli()})
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrNotFound) {
			continue // active again, or another process is on it
		}
		if err != nil {
			return res, err
		}
		counts, err := s.purge(ctx, sess.SessionID, audit.Retention, map[string]any{"days": days, "last_activity": a.LastActivity, "agents": a.Agents})
		if err != nil {
			return res, err
		}
		res.Sessions++
		res.add(counts)
	}
	return res, nil
}

// pruneAgentSession deletes an agent session's events older than the
// agent's retention, oldest first.
func (s *Sweeper) pruneAgentSession(ctx context.Context, sessionID string, now time.Time, res *Result) error {
	agent := strings.TrimPrefix(sessionID, s.opts.AgentSessionPrefix)
	days := s.keepDays([]string{agent})
	if days == 0 {
		return nil
	}
	cutoff := now.Add(-period(days)).UnixMilli()
	total := 0
	for {
		n, err := s.st.EventsDeleteBefore(ctx, sessionID, cutoff, s.opts.BatchSize)
		if err != nil {
			return err
		}
		total += n
		if n < s.opts.BatchSize {
			break
		}
	}
	if total == 0 {
		return nil
	}
	res.add(store.SessionPurgeCounts{"events": int64(total)})
	return s.st.InTx(ctx, func(tx store.Queries) error {
		return audit.WriteAs(ctx, tx, audit.Retention, audit.EventsPrune, sessionID, map[string]any{"events": total, "days": days})
	})
}

// ErrActive answers the deletion of a session with an active or queued run.
var ErrActive = errors.New("the session has an active run")

// Delete removes one session now (DELETE /v1/sessions/{id}): ErrActive if
// a run of it is active or queued, store.ErrNotFound if there is no such
// session. The actor comes from ctx (audit.WithActor).
func (s *Sweeper) Delete(ctx context.Context, sessionID string, detail map[string]any) (store.SessionPurgeCounts, error) {
	err := s.st.SessionPurgeBegin(ctx, &store.SessionPurgeBeginParams{SessionID: sessionID, Owner: s.opts.Owner, Reason: "delete", At: s.opts.Now().UnixMilli()})
	switch {
	case errors.Is(err, store.ErrConflict):
		return nil, ErrActive
	case err != nil:
		return nil, err
	}
	actor := audit.ActorFrom(ctx)
	if actor == "" {
		actor = audit.Admin
	}
	// The deletion goes on if the caller hangs up: a half-deleted session
	// would wait for the sweeper.
	return s.purgeAs(context.WithoutCancel(ctx), sessionID, actor, audit.SessionDelete, detail)
}

// purge deletes a session whose purge is recorded, batch by batch, and
// finishes with the session row, the purge record and the audit row in
// one transaction.
func (s *Sweeper) purge(ctx context.Context, sessionID, actor string, detail map[string]any) (store.SessionPurgeCounts, error) {
	return s.purgeAs(ctx, sessionID, actor, audit.SessionPurge, detail)
}

func (s *Sweeper) purgeAs(ctx context.Context, sessionID, actor, action string, detail map[string]any) (store.SessionPurgeCounts, error) {
	// Every table is named, a zero included: the answer's and the audit
	// row's deleted:{events, messages, runs, tool_calls, approvals} (API.md).
	counts := store.SessionPurgeCounts{"events": 0, "messages": 0, "runs": 0, "tool_calls": 0, "approvals": 0}
	for {
		c, done, err := s.st.SessionPurgeBatch(ctx, sessionID, s.opts.BatchSize)
		if err != nil {
			return counts, err
		}
		for k, v := range c {
			counts[k] += v
		}
		if done {
			break
		}
	}
	if detail == nil {
		detail = map[string]any{}
	}
	detail["deleted"] = counts
	err := s.st.InTx(ctx, func(tx store.Queries) error {
		if err := tx.SessionPurgeFinish(ctx, sessionID, s.opts.Now().UnixMilli()); err != nil {
			return err
		}
		return audit.WriteAs(ctx, tx, actor, action, sessionID, detail)
	})
	if err != nil {
		return counts, err
	}
	if s.opts.Deleted != nil {
		s.opts.Deleted(sessionID)
	}
	s.opts.Logger.Info("session deleted", "session_id", sessionID, "by", actor, "rows", counts)
	return counts, nil
}
