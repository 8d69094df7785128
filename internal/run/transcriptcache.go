package run

import (
	"container/list"
	"sync"

	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// transcriptCacheBytes is the default bound of a Manager's transcript
// cache: the content of the transcripts it holds, plus a message's worth
// of overhead each.
const transcriptCacheBytes = 64 << 20

// messageOverhead is what a cached message costs besides its content: the
// store.Message's strings and ids, roughly.
const messageOverhead = 256

// transcriptCache keeps the root transcripts this process read, by
// session, so that a session's next run reads only the messages added
// since — one small statement — instead of its newest TranscriptLimit
// messages again (200 turns: ~0.8 ms of SQLite's CPU, ~1.3 ms on
// PostgreSQL, on every run of a long session). The store's transcript
// version says whether the copy is still whole (store.Transcript), so
// replicas, POST /sessions/{id}/messages and a session deleted and made
// again need nothing from the cache. Least recently used out first.
type transcriptCache struct {
	mu      sync.Mutex
	max     int64
	bytes   int64
	order   list.List // of *cachedTranscript, the most recently used first
	entries map[string]*list.Element

	reads *metrics.CounterVec // agentplane_transcript_reads_total
}

// cachedTranscript is a session's transcript as of version: the store's
// answer, oldest first, never changed in place once cached.
type cachedTranscript struct {
	sessionID string
	version   int64
	createdAt int64
	msgs      []store.Message
	size      int64
}

// newestID is the id after which the store holds what this copy lacks.
func (c *cachedTranscript) newestID() string {
	if len(c.msgs) == 0 {
		return ""
	}
	return c.msgs[len(c.msgs)-1].MessageID
}

// ForgetSession drops what this process keeps of a deleted session in
// memory: its transcript copy, which the session's created_at already
// keeps from ever being used again; this frees it at once (retention). Other
// processes drop theirs when the session is next read or LRU makes room.
func (m *Manager) ForgetSession(sessionID string) { m.transcripts.drop(sessionID) }

func newTranscriptCache(maxBytes int64, reg *metrics.Registry) *transcriptCache {
	tc := &transcriptCache{max: maxBytes, entries: map[string]*list.Element{}, reads: metrics.TranscriptReads(reg)}
	reg.GaugeFunc("agentplane_transcript_cache_bytes", "What this process keeps of transcripts in memory.", func() float64 {
		tc.mu.Lock()
		defer tc.mu.Unlock()
		return float64(tc.bytes)
	})
	return tc
}

// get returns the session's copy, or nil.
func (tc *transcriptCache) get(sessionID string) *cachedTranscript {
	if tc.max <= 0 {
		return nil
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	e := tc.entries[sessionID]
	if e == nil {
		return nil
	}
	tc.order.MoveToFront(e)
	return e.Value.(*cachedTranscript)
}

// put stores the session's transcript as of version, unless a newer one is
// already there (two runs of a session may read at once), then drops the
// least recently used copies beyond the bound.
func (tc *transcriptCache) put(sessionID string, version, createdAt int64, msgs []store.Message) {
	if tc.max <= 0 || createdAt == 0 {
		return
	}
	c := &cachedTranscript{sessionID: sessionID, version: version, createdAt: createdAt, msgs: msgs}
	for _, m := range msgs {
		c.size += int64(len(m.Content)) + messageOverhead
	}
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if e := tc.entries[sessionID]; e != nil {
		old := e.Value.(*cachedTranscript)
		if old.createdAt == createdAt && old.version > version {
			return
		}
		tc.remove(e)
	}
	if c.size > tc.max {
		return
	}
	tc.entries[sessionID] = tc.order.PushFront(c)
	tc.bytes += c.size
	for tc.bytes > tc.max {
		tc.remove(tc.order.Back())
	}
}

// drop forgets the session's copy.
func (tc *transcriptCache) drop(sessionID string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if e := tc.entries[sessionID]; e != nil {
		tc.remove(e)
	}
}

func (tc *transcriptCache) remove(e *list.Element) {
	c := tc.order.Remove(e).(*cachedTranscript)
	delete(tc.entries, c.sessionID)
	tc.bytes -= c.size
}
