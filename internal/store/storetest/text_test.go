package storetest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// oddTexts are strings SQLite keeps as they are and PostgreSQL's text type
// refuses (a NUL byte, invalid UTF-8), plus strings that look like an
// escaped value, which must not be mistaken for one (issue 8, item 1).
var oddTexts = []string{
	"a\x00b", "\x00", "\x00\x00end", "bad \xff\xfe utf-8", "\ufdd0looks escaped", "\ufdd00", "mid\ufdd0dle",
	"\x01", "\x01\x00", "plain", "emoji 😀 and \u2028",
}

// oddJSON are JSON values PostgreSQL's jsonb refuses: \u0000, a lone
// surrogate, a number beyond its numeric type, raw invalid UTF-8 in a string.
var oddJSON = []string{
	`{"text":"a\u0000b"}`, `{"detail":"\u0000"}`, `{"s":"\ud800"}`, `["\udfff\ud800"]`, `{"n":1e999999}`,
	`[1e999999,-1e-999999,"\u0000\ud800"]`, "{\"raw\":\"\xff\"}", `  {"spaced" :  true }  `, `{"b":1,"a":2}`,
}

// textCase names the i-th odd string and odd JSON value for a subtest.
func eachOdd(t *testing.T, fn func(t *testing.T, text string, js json.RawMessage)) {
	n := max(len(oddTexts), len(oddJSON))
	for i := range n {
		text, js := oddTexts[i%len(oddTexts)], json.RawMessage(oddJSON[i%len(oddJSON)])
		t.Run(fmt.Sprintf("%d", i), func(t *testing.T) { fn(t, text, js) })
	}
}

func sameJSON(t *testing.T, field string, got, want json.RawMessage) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Errorf("%s = %q, want %q (stored byte for byte)", field, got, want)
	}
}

func sameText(t *testing.T, field, got, want string) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %q, want %q", field, got, want)
	}
}

// Every text and JSON field the platform stores comes back exactly as it
// was written, on both stores: user messages, deltas, state details, tool
// args/results, transcript messages, context data, agent names, reasons,
// and identifiers too (they are looked up by the same odd value).
func TestOddTextRoundTrips(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		eachOdd(t, func(t *testing.T, text string, js json.RawMessage) {
			sid := ids.New("ses") + text
			sess, err := s.SessionCreate(ctx, &store.SessionCreateParams{SessionID: sid, UserID: "u" + text, CreatedAt: 1, Metadata: js})
			if err != nil {
				t.Fatalf("create session: %v", err)
			}
			got, err := s.SessionGet(ctx, sid)
			if err != nil {
				t.Fatalf("get session: %v", err)
			}
			sameText(t, "session id", got.SessionID, sess.SessionID)
			sameText(t, "user id", got.UserID, "u"+text)
			sameJSON(t, "metadata", got.Metadata, js)

			// Events: a user message, a delta and a state detail.
			userInput, _ := json.Marshal(map[string]any{"message": map[string]string{"role": "user", "content": text}})
			delta, _ := json.Marshal(map[string]string{"text": text})
			state := json.RawMessage(`{"state":"thinking","detail":` + string(js) + `}`)
			rid := ids.New("run") + text
			params := []store.EventParams{
				{SessionID: sid, RunID: rid, TS: 1, Type: "user_input", Payload: userInput},
				{SessionID: sid, RunID: rid, TS: 2, Type: "agent_stream_delta", Payload: delta},
				{SessionID: sid, RunID: rid, TS: 3, Type: "state", Payload: state},
				{SessionID: sid, RunID: rid, TS: 4, Type: "odd" + text, Payload: js},
			}
			if _, err := s.EventsAppend(ctx, params); err != nil {
				t.Fatalf("append events: %v", err)
			}
			for _, list := range []*store.EventsListParams{{SessionID: sid}, {RunID: rid}, {SessionID: sid, RunID: rid}} {
				evs, err := s.EventsList(ctx, list)
				if err != nil {
					t.Fatalf("list events: %v", err)
				}
				if len(evs) != len(params) {
					t.Fatalf("list %+v: %d events, want %d", list, len(evs), len(params))
				}
				for i, e := range evs {
					sameJSON(t, "payload of "+params[i].Type, e.Payload, params[i].Payload)
					sameText(t, "event session", e.SessionID, sid)
					sameText(t, "event run", e.RunID, rid)
					sameText(t, "event type", e.Type, params[i].Type)
				}
			}
			if evs, err := s.EventsList(ctx, &store.EventsListParams{SessionID: sid, Type: "odd" + text}); err != nil || len(evs) != 1 {
				t.Fatalf("list by odd type: %d events, %v", len(evs), err)
			}

			// The transcript.
			for _, role := range []string{"user", "assistant"} {
				if _, err := s.MessageAppend(ctx, &store.MessageAppendParams{MessageID: ids.New("msg"), SessionID: sid, RunID: rid, Role: role, Content: text, CreatedAt: 1}); err != nil {
					t.Fatalf("append message: %v", err)
				}
			}
			msgs, err := s.MessagesList(ctx, &store.MessagesListParams{SessionID: sid})
			if err != nil || len(msgs) != 2 {
				t.Fatalf("messages: %v, %v", msgs, err)
			}
			for _, m := range msgs {
				sameText(t, "message content", m.Content, text)
				sameText(t, "message run", m.RunID, rid)
			}

			// A run's error and usage.
			run, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: rid, SessionID: sid, AgentID: "agent" + text, UserID: "u" + text, Owner: "o" + text, StartedAt: 1})
			if err != nil {
				t.Fatalf("insert run: %v", err)
			}
			sameText(t, "run agent", run.AgentID, "agent"+text)
			ended, err := s.RunTransition(ctx, &store.RunTransitionParams{RunID: rid, From: []string{store.RunRunning}, Status: store.RunFailed, At: 2, Error: js, Usage: js})
			if err != nil {
				t.Fatalf("end run: %v", err)
			}
			sameJSON(t, "run error", ended.Error, js)
			if r, err := s.RunGet(ctx, rid); err != nil {
				t.Fatalf("get run: %v", err)
			} else {
				sameJSON(t, "run usage", r.Usage, js)
				sameText(t, "run owner", r.Owner, "o"+text)
			}

			// An agent's name, endpoint, capabilities.
			aid := "agent" + text
			a, err := s.AgentUpsert(ctx, &store.AgentUpsertParams{AgentID: aid, Name: "name " + text, Endpoint: "http://x/" + text,
				Capabilities: js, LinkedAgents: json.RawMessage(`["` + "\\u0000" + `"]`), KeyHash: ids.New("kh"), At: 1})
			if err != nil {
				t.Fatalf("upsert agent: %v", err)
			}
			for _, get := range []func() (*store.Agent, error){
				func() (*store.Agent, error) { return s.AgentGet(ctx, aid) },
				func() (*store.Agent, error) { return s.AgentGetByKeyHash(ctx, a.KeyHash) },
			} {
				got, err := get()
				if err != nil {
					t.Fatalf("get agent: %v", err)
				}
				sameText(t, "agent id", got.AgentID, aid)
				sameText(t, "agent name", got.Name, "name "+text)
				sameText(t, "agent endpoint", got.Endpoint, "http://x/"+text)
				sameJSON(t, "capabilities", got.Capabilities, js)
				sameJSON(t, "linked agents", got.LinkedAgents, json.RawMessage(`["\u0000"]`))
			}

			// Context data, under an odd key.
			b, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: aid, Key: "k" + text, Data: js, At: 1})
			if err != nil {
				t.Fatalf("put context: %v", err)
			}
			v := b.Version
			if _, err := s.ContextPut(ctx, &store.ContextPutParams{OwnerID: aid, Key: "k" + text, Data: js, IfVersion: &v, At: 2}); err != nil {
				t.Fatalf("put context if version: %v", err)
			}
			for _, version := range []int64{0, 1, 2} {
				got, err := s.ContextGet(ctx, aid, "k"+text, version)
				if err != nil {
					t.Fatalf("get context v%d: %v", version, err)
				}
				sameJSON(t, "context data", got.Data, js)
			}
		})
	})
}

// Tool definitions, calls and approvals keep odd args, results, errors,
// idempotency keys and reasons too.
func TestOddTextRoundTripsTools(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		eachOdd(t, func(t *testing.T, text string, js json.RawMessage) {
			def := json.RawMessage(`{"kind":"server","description":` + mustJSON(text) + `,"parameters":` + string(js) + `}`)
			name := ids.New("tool") + text
			if _, _, err := s.ToolPut(ctx, &store.ToolPutParams{Name: name, Definition: def, At: 1}); err != nil {
				t.Fatalf("put tool: %v", err)
			}
			if got, err := s.ToolGet(ctx, name); err != nil {
				t.Fatalf("get tool: %v", err)
			} else {
				sameJSON(t, "tool definition", got.Definition, def)
				sameText(t, "tool name", got.Name, name)
			}

			sid, rid := newRun(t, s)
			p := callParams(sid, rid, "key"+text)
			p.Args, p.ToolName = js, name
			c, err := s.ToolCallInsert(ctx, p)
			if err != nil {
				t.Fatalf("insert call: %v", err)
			}
			sameJSON(t, "args", c.Args, js)
			again := callParams(sid, rid, "key"+text)
			if dup, err := s.ToolCallInsert(ctx, again); !errors.Is(err, store.ErrDuplicate) || dup.ToolCallID != c.ToolCallID {
				t.Fatalf("same odd idempotency key: %v, %v; want the first call with ErrDuplicate", dup, err)
			}
			appr, err := s.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("apr"), ToolCallID: c.ToolCallID, RunID: rid,
				SessionID: sid, ToolName: name, ArgsSummary: "summary " + text, ExpiresAt: 1 << 40, At: 1})
			if err == nil {
				sameText(t, "args summary", appr.ArgsSummary, "summary "+text)
				decided, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: appr.ApprovalID, Status: store.ApprovalRejected, DecidedBy: "u" + text, Reason: "because " + text, At: 2})
				if err != nil {
					t.Fatalf("decide: %v", err)
				}
				got, err := s.ApprovalGet(ctx, decided.ApprovalID)
				if err != nil {
					t.Fatalf("get approval: %v", err)
				}
				sameText(t, "reason", got.Reason, "because "+text)
				sameText(t, "decided by", got.DecidedBy, "u"+text)
				sameText(t, "approval tool", got.ToolName, name)
			} else {
				t.Fatalf("insert approval: %v", err)
			}

			// A call that runs and ends with an odd result, error and policy.
			c2 := insertCall(t, s, sid, rid, "")
			step(t, s, c2.ToolCallID, store.ToolCallCreated, store.ToolCallPolicyChecked, 2)
			pol := stepParams(c2.ToolCallID, store.ToolCallPolicyChecked, store.ToolCallDispatched, 3)
			pol.Policy = js
			if _, err := s.ToolCallTransition(ctx, pol); err != nil {
				t.Fatalf("dispatch: %v", err)
			}
			step(t, s, c2.ToolCallID, store.ToolCallDispatched, store.ToolCallRunning, 4)
			end := stepParams(c2.ToolCallID, store.ToolCallRunning, store.ToolCallFailed, 5)
			end.Result, end.Error = js, js
			if _, err := s.ToolCallTransition(ctx, end); err != nil {
				t.Fatalf("fail: %v", err)
			}
			got, err := s.ToolCallGet(ctx, c2.ToolCallID)
			if err != nil {
				t.Fatalf("get call: %v", err)
			}
			sameJSON(t, "result", got.Result, js)
			sameJSON(t, "error", got.Error, js)
			sameJSON(t, "policy", got.Policy, js)
		})
	})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
