package sqlstore

import (
	"context"
	"sync"
)

// WriteMemo is what SQLite's writer connection remembers between its
// transactions of two reads the event log made on every commit: each
// session's last seq (to number its next events) and which runs are
// still active (to drop stream output of an ended run). At 200 streams
// those two statements were a sixth of the server's CPU (issue 13): a
// commit of 13 streams asked about 13 sessions and 16 runs, two b-tree
// seeks each, to learn what the previous commit had just learned.
//
// A memo is only as good as its view of every change, so it is kept by
// the dialect, which sees them all (internal/store/sqlite): a hook on the
// connection tells it of each row of runs or sessions changed or deleted
// and of each event inserted other than by EventsAppend, and once per
// transaction it asks SQLite whether any other connection has committed
// since (PRAGMA data_version), forgetting everything if so. What a
// transaction learns or writes is staged, and holds only once it
// commits; a rollback drops it. Forgetting is immediate. So the memo can
// be missing facts, never hold a wrong one: a run it holds active has
// not been updated since it was read active, and a session's last seq is
// the one its last committed append wrote.
type WriteMemo struct {
	mu sync.Mutex
	// seqs: a session's last seq, committed; txSeqs: this transaction's.
	seqs, txSeqs map[string]int64
	// active: runs read active, committed; txActive: this transaction's.
	active, txActive map[string]bool
	// appending: EventsAppend's own inserts are running.
	appending bool
	// version is the PRAGMA data_version the memo is valid for.
	version int64
	// hits and misses count sessions and runs answered from the memo and
	// read from the database (tests).
	hits, misses int
}

// memoMax bounds each of the memo's maps; one past it is cleared. A
// server's working set of streaming sessions is far smaller; the bound
// keeps a long life of short sessions from holding them all.
const memoMax = 1 << 16

// NewWriteMemo is an empty memo.
func NewWriteMemo() *WriteMemo {
	return &WriteMemo{seqs: map[string]int64{}, txSeqs: map[string]int64{}, active: map[string]bool{}, txActive: map[string]bool{}}
}

// Memoizer is a Pipe with a WriteMemo (SQLite's writer connection).
type Memoizer interface {
	// Memo is the memo, checked against other connections' commits once
	// per transaction; nil when it cannot be used.
	Memo(ctx context.Context) *WriteMemo
}

// memo is q's transaction's WriteMemo, nil outside one or on a database
// without.
func (q *queries) memo(ctx context.Context) *WriteMemo {
	if m, ok := q.pipe.(Memoizer); ok {
		return m.Memo(ctx)
	}
	return nil
}

// Since is told the database's data_version at a transaction's start; a
// change from the last one means another connection committed, and
// everything is forgotten.
func (m *WriteMemo) Since(version int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if version != m.version {
		m.forgetLocked()
		m.version = version
	}
}

// Forget drops everything: what the memo cannot tell apart.
func (m *WriteMemo) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.forgetLocked()
}

func (m *WriteMemo) forgetLocked() {
	clear(m.seqs)
	clear(m.txSeqs)
	clear(m.active)
	clear(m.txActive)
}

// RunChanged is told that a runs row was updated or deleted.
func (m *WriteMemo) RunChanged(runID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.active, runID)
	delete(m.txActive, runID)
}

// SessionChanged is told that a sessions row was updated or deleted.
func (m *WriteMemo) SessionChanged(sessionID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seqs, sessionID)
	delete(m.txSeqs, sessionID)
}

// EventInserted is told of each event row inserted: one not inserted by
// EventsAppend numbers a session behind the memo's back.
func (m *WriteMemo) EventInserted() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.appending {
		clear(m.seqs)
		clear(m.txSeqs)
	}
}

// Commit: the transaction committed, what it staged holds.
func (m *WriteMemo) Commit() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.seqs)+len(m.txSeqs) > memoMax {
		clear(m.seqs)
	}
	for s, last := range m.txSeqs {
		m.seqs[s] = last
	}
	if len(m.active)+len(m.txActive) > memoMax {
		clear(m.active)
	}
	for r := range m.txActive {
		m.active[r] = true
	}
	clear(m.txSeqs)
	clear(m.txActive)
}

// Discard: the transaction rolled back, what it staged is dropped.
func (m *WriteMemo) Discard() {
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.txSeqs)
	clear(m.txActive)
	m.appending = false
}

// lastSeq is a session's last seq, if known.
func (m *WriteMemo) lastSeq(sessionID string) (int64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.txSeqs[sessionID]
	if !ok {
		last, ok = m.seqs[sessionID]
	}
	m.count(ok)
	return last, ok
}

// wroteSeq stages a session's last seq after an append.
func (m *WriteMemo) wroteSeq(sessionID string, last int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txSeqs[sessionID] = last
}

// setAppending marks EventsAppend's own inserts running, or done.
func (m *WriteMemo) setAppending(on bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.appending = on
}

// knownActive reports a run known to be active.
func (m *WriteMemo) knownActive(runID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	ok := m.txActive[runID] || m.active[runID]
	m.count(ok)
	return ok
}

// unknownRuns is runIDs without the runs known to be active and without
// adjacent repeats (a caller's filling), filled up again by repeating the
// last to a power of two, so the statement asking about them has few
// texts. Empty when all are known.
func (m *WriteMemo) unknownRuns(runIDs []string) []string {
	var ask []string
	for i, id := range runIDs {
		if (i > 0 && id == runIDs[i-1]) || m.knownActive(id) {
			continue
		}
		ask = append(ask, id)
	}
	for n := len(ask); n > 0 && n&(n-1) != 0; n++ {
		ask = append(ask, ask[len(ask)-1])
	}
	return ask
}

// readActive stages a run read active.
func (m *WriteMemo) readActive(runID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.txActive[runID] = true
}

func (m *WriteMemo) count(hit bool) {
	if hit {
		m.hits++
	} else {
		m.misses++
	}
}

// Counts reports how many sessions' seqs and runs' states were answered
// from the memo and how many read from the database (tests).
func (m *WriteMemo) Counts() (hits, misses int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits, m.misses
}
