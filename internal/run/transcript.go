package run

import (
	"context"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/store"
)

// transcriptFirstPage is the first page of messages read for a transcript;
// each further page doubles it. Most transcripts fit in one or two reads,
// and a session of a few huge messages is not read further than the byte
// bound needs (the store cannot tell sizes without reading the rows).
const transcriptFirstPage = 8

// truncationReserve is the least room worth cutting a message into; with
// less left, older messages are dropped instead.
const truncationReserve = 256

// loadTranscript reads the session's root-level messages (child runs' turns
// are left out, DESIGN §11) for a root agent's messages[]:
// the newest first, at most TranscriptLimit of them and MaxTranscriptBytes
// of content (issue 8: a 400 MB answer was sent back to the agent whole).
// Oldest first in the result.
func (m *Manager) loadTranscript(ctx context.Context, sessionID string) ([]agent.Message, error) {
	budget := m.opts.MaxTranscriptBytes
	var newestFirst []agent.Message
	before := ""
	for page := transcriptFirstPage; len(newestFirst) < m.opts.TranscriptLimit && budget > 0; page *= 2 {
		limit := min(page, m.opts.TranscriptLimit-len(newestFirst))
		msgs, err := m.st.MessagesList(ctx, &store.MessagesListParams{SessionID: sessionID, Before: before, Limit: limit, RootOnly: true})
		if err != nil {
			return nil, err
		}
		var full bool
		newestFirst, budget, full = takeNewest(newestFirst, msgs, budget, len(newestFirst) == 0)
		if full || len(msgs) < limit {
			break
		}
		before = msgs[0].MessageID
	}
	slices.Reverse(newestFirst)
	return newestFirst, nil
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
