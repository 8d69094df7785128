package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// MessagesTranscript returns, oldest first, the newest root-level messages
// that begin within the byte budget counted from the newest — so the
// caller can cut the one across it — and no more than limit of them.
func TestMessagesTranscript(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		add := func(id, parent, content string) {
			t.Helper()
			if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: id, SessionID: sid, ParentRunID: parent, Role: "user", Content: content, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		// msg_00 … msg_09, 1,000 bytes each ("é" is two), and a child
		// run's turn among them, which a root agent's transcript leaves out.
		for i := range 10 {
			add(fmt.Sprintf("msg_%02d", i), "", fmt.Sprintf("%02d", i)+strings.Repeat("é", 499))
			if i == 8 {
				add("msg_08x", "run_parent", "a child's turn")
			}
		}
		ids := func(limit, budget int) string {
			t.Helper()
			tr, err := s.MessagesTranscript(ctx, sid, limit, budget)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, m := range tr.Messages {
				if len(m.Content) != 1000 || m.SessionID != sid || m.ParentRunID != "" {
					t.Fatalf("message %+v", m)
				}
				out = append(out, m.MessageID)
			}
			return strings.Join(out, ",")
		}
		for _, c := range []struct {
			limit, budget int
			want          string
		}{
			{200, 2500, "msg_07,msg_08,msg_09"}, // two fit, the third begins at 2,000 < 2,500
			{200, 2000, "msg_07,msg_08,msg_09"}, // the third begins exactly at the bound: the caller decides
			{200, 1999, "msg_08,msg_09"},        // …and one byte less leaves it out
			{2, 1 << 20, "msg_08,msg_09"},       // the count bound
			{200, 1 << 20, "msg_00,msg_01,msg_02,msg_03,msg_04,msg_05,msg_06,msg_07,msg_08,msg_09"},
			{200, 1, "msg_09"}, // the newest always begins within the budget
			{0, 1000, ""}, {5, 0, ""},
		} {
			if got := ids(c.limit, c.budget); got != c.want {
				t.Errorf("limit %d, budget %d: %s, want %s", c.limit, c.budget, got, c.want)
			}
		}
		if tr, err := s.MessagesTranscript(ctx, "ses_none", 200, 1000); err != nil || len(tr.Messages) != 0 || tr.Version != 0 || tr.SessionCreatedAt != 0 {
			t.Fatalf("unknown session: %+v %v", tr, err)
		}
	})
}

// A session's transcript version counts its root-level messages as they
// are added, in the adding transaction; MessagesTranscriptAfter reads the
// messages above an id with the version in one snapshot, so a reader can
// tell that a message committed among older ones (its id made before a
// newer message's commit) is missing from what it holds.
func TestMessagesTranscriptVersion(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid := newSession(t, s)
		add := func(id, parent string) {
			t.Helper()
			if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: id, SessionID: sid, ParentRunID: parent, Role: "user", Content: "c " + id, CreatedAt: 1}); err != nil {
				t.Fatal(err)
			}
		}
		ids := func(msgs []store.Message) string {
			var out []string
			for _, m := range msgs {
				out = append(out, m.MessageID)
			}
			return strings.Join(out, ",")
		}
		first, err := s.MessagesTranscript(ctx, sid, 200, 1<<20)
		if err != nil || len(first.Messages) != 0 || first.SessionCreatedAt != 1 {
			t.Fatalf("a new session: %+v %v", first, err)
		}
		v := first.Version
		add("msg_1", "")
		add("msg_1c", "run_parent") // a child's turn: not in the transcript, not counted
		add("msg_3", "")
		full, err := s.MessagesTranscript(ctx, sid, 200, 1<<20)
		if err != nil || full.Version != v+2 || ids(full.Messages) != "msg_1,msg_3" {
			t.Fatalf("after two: %+v %v", full, err)
		}
		for _, c := range []struct {
			after string
			limit int
			want  string
		}{{"", 200, "msg_1,msg_3"}, {"msg_1", 200, "msg_3"}, {"msg_3", 200, ""}, {"", 1, "msg_1"}} {
			tr, err := s.MessagesTranscriptAfter(ctx, sid, c.after, c.limit)
			if err != nil || tr.Version != v+2 || tr.SessionCreatedAt != 1 || ids(tr.Messages) != c.want {
				t.Errorf("after %q, limit %d: %+v %v, want %s at version %d", c.after, c.limit, tr, err, c.want, v+2)
			}
		}
		// A message that commits late with an older id: nothing above
		// msg_3, but the version moved by one.
		add("msg_2", "")
		if tr, err := s.MessagesTranscriptAfter(ctx, sid, "msg_3", 200); err != nil || tr.Version != v+3 || len(tr.Messages) != 0 {
			t.Fatalf("after a late message: %+v %v", tr, err)
		}
		// A message whose transaction rolls back is not counted.
		boom := errors.New("boom")
		if err := s.InTx(ctx, func(tx store.Queries) error {
			if _, err := tx.MessageAppend(ctx, &store.MessageAppendParams{MessageID: "msg_4", SessionID: sid, Role: "user", Content: "x", CreatedAt: 1}); err != nil {
				return err
			}
			// read in the transaction, so the insert has reached the database
			if tr, err := tx.MessagesTranscriptAfter(ctx, sid, "msg_3", 200); err != nil || tr.Version != v+4 || ids(tr.Messages) != "msg_4" {
				t.Errorf("inside the transaction: %+v %v", tr, err)
			}
			return boom
		}); !errors.Is(err, boom) {
			t.Fatal(err)
		}
		if tr, err := s.MessagesTranscriptAfter(ctx, sid, "msg_3", 200); err != nil || tr.Version != v+3 || len(tr.Messages) != 0 {
			t.Fatalf("after a rolled back message: %+v %v", tr, err)
		}
		if _, err := s.MessagesTranscriptAfter(ctx, "ses_none", "", 200); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown session: %v", err)
		}
	})
}
