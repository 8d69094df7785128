package run

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/metrics"
	"github.com/agentplane/agentplane/internal/store"
)

// truncationReserve is the least room worth cutting a message into; with
// less left, older messages are dropped instead.
const truncationReserve = 256

// loadTranscript reads the session's root-level messages (child runs' turns
// are left out, DESIGN §11) for a root agent's messages[]:
// the newest first, at most TranscriptLimit of them and MaxTranscriptBytes
// of content (issue 8: a 400 MB answer was sent back to the agent whole).
// Oldest first in the result.
func (m *Manager) loadTranscript(ctx context.Context, sessionID string) ([]agent.Message, error) {
	msgs, err := m.transcriptMessages(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	newestFirst, _, _ := takeNewest(nil, msgs, m.opts.MaxTranscriptBytes, true)
	slices.Reverse(newestFirst)
	return newestFirst, nil
}

// transcriptMessages is the store's MessagesTranscript for the session,
// from the copy this process holds and the messages added since when the
// session's version says nothing else was added, else read whole (and
// kept for the next run).
func (m *Manager) transcriptMessages(ctx context.Context, sessionID string) ([]store.Message, error) {
	if c := m.transcripts.get(sessionID); c != nil {
		newer, err := m.st.MessagesTranscriptAfter(ctx, sessionID, c.newestID(), m.opts.TranscriptLimit)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if err == nil && newer.SessionCreatedAt == c.createdAt && len(newer.Messages) < m.opts.TranscriptLimit &&
			newer.Version-c.version == int64(len(newer.Messages)) {
			msgs := m.transcriptBound(append(slices.Clip(c.msgs), newer.Messages...))
			m.transcripts.put(sessionID, newer.Version, newer.SessionCreatedAt, msgs)
			m.transcripts.reads.Inc(metrics.TranscriptFromMemory)
			return msgs, nil
		}
		m.transcripts.drop(sessionID)
	}
	// One read: the store returns just the messages the byte bound lets
	// through (and the one across it), not pages of rows to discard.
	t, err := m.st.MessagesTranscript(ctx, sessionID, m.opts.TranscriptLimit, m.opts.MaxTranscriptBytes)
	if err != nil {
		return nil, err
	}
	m.transcripts.put(sessionID, t.Version, t.SessionCreatedAt, t.Messages)
	m.transcripts.reads.Inc(metrics.TranscriptFromStore)
	return t.Messages, nil
}

// transcriptBound keeps of msgs (oldest first) what MessagesTranscript
// would return of them: the newest, at most TranscriptLimit, that begin
// within MaxTranscriptBytes counted from the newest. A message it drops
// can never be returned again: only newer ones are added.
func (m *Manager) transcriptBound(msgs []store.Message) []store.Message {
	n, used := 0, 0
	for i := len(msgs) - 1; i >= 0 && n < m.opts.TranscriptLimit && used <= m.opts.MaxTranscriptBytes; i-- {
		used += len(msgs[i].Content)
		n++
	}
	return msgs[len(msgs)-n:]
}

// takeNewest appends msgs (oldest first) to out newest first while their
// content fits in budget. The first message that does not fit is cut to
// the room left, with a marker, when that room is worth it — always when
// it is the transcript's newest message (first), so one message over the
// bound never empties the transcript — and then the transcript is full.
func takeNewest(out []agent.Message, msgs []store.Message, budget int, first bool) ([]agent.Message, int, bool) {
	for i := len(msgs) - 1; i >= 0; i-- {
		c := msgs[i].Content
		if len(c) <= budget {
			out = append(out, agent.Message{Role: msgs[i].Role, Content: c})
			budget -= len(c)
			first = false
			continue
		}
		if first || budget >= truncationReserve {
			out = append(out, agent.Message{Role: msgs[i].Role, Content: truncateContent(c, budget)})
		}
		return out, 0, true
	}
	return out, budget, false
}

// truncateContent cuts s (longer than n) to at most n bytes of valid
// UTF-8 (n ≥ 100): the head, and a marker saying how much was left out.
func truncateContent(s string, n int) string {
	marker := func(shown int) string {
		return fmt.Sprintf("\n[… truncated by agentplane: %d of %d bytes shown]", shown, len(s))
	}
	keep := max(n-len(marker(n)), 0) // shown ≤ n: its marker is no longer
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return s[:keep] + marker(keep)
}
