package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/store/postgres"
	"github.com/agentplane/agentplane/internal/store/sqlite"
	"github.com/agentplane/agentplane/internal/testdb"
)

// newRun makes a session with a running root run.
func newRun(t *testing.T, s store.Store) (sessionID, runID string) {
	t.Helper()
	sessionID = newSession(t, s)
	runID = ids.New("run")
	if _, err := s.RunInsert(context.Background(), &store.RunInsertParams{RunID: runID, SessionID: sessionID, AgentID: "a1", Owner: "i1", StartedAt: 1}); err != nil {
		t.Fatal(err)
	}
	return sessionID, runID
}

// callParams describes a fresh CREATED call in a run.
func callParams(sessionID, runID, key string) *store.ToolCallInsertParams {
	return &store.ToolCallInsertParams{
		ToolCallID: ids.New("tc"), RunID: runID, SessionID: sessionID, AgentID: "a1", ToolName: "payments.transfer",
		Kind: store.ToolKindServer, Args: json.RawMessage(`{"amount":150,"to":"bob"}`), IdempotencyKey: key,
		ArgsHash: "h1", TimeoutMS: 60000, At: 10,
	}
}

func insertCall(t *testing.T, s store.Queries, sessionID, runID, key string) *store.ToolCall {
	t.Helper()
	c, err := s.ToolCallInsert(context.Background(), callParams(sessionID, runID, key))
	if err != nil {
		t.Fatalf("insert tool call: %v", err)
	}
	return c
}

// stepParams is the transition a service would make from → to at time at:
// a deadline when entering a waiting state, the policy record, an approval
// id, a claim, a result or an error as the target state calls for.
func stepParams(id, from, to string, at int64) *store.ToolCallTransitionParams {
	p := &store.ToolCallTransitionParams{ID: id, From: []string{from}, Status: to, At: at}
	if slices.Contains(store.ToolCallWaitingStatuses, to) {
		d := at + 1000
		p.DeadlineAt = &d
	}
	switch to {
	case store.ToolCallPolicyChecked:
		p.Policy = json.RawMessage(`{"decision":"allow","rule":"default"}`)
	case store.ToolCallWaitingApproval:
		a := "apr_" + id
		p.ApprovalID = &a
	case store.ToolCallRunning:
		p.IncAttempts = true
	case store.ToolCallSucceeded:
		p.Result = json.RawMessage(`{"ok":true}`)
	case store.ToolCallFailed, store.ToolCallTimeout, store.ToolCallRejected, store.ToolCallExpired,
		store.ToolCallBlocked, store.ToolCallCancelled:
		p.Error = json.RawMessage(`{"code":"` + strings.ToLower(to) + `"}`)
	}
	return p
}

// step makes one legal transition and checks what it stored.
func step(t *testing.T, s store.Queries, id, from, to string, at int64) *store.ToolCall {
	t.Helper()
	p := stepParams(id, from, to, at)
	c, err := s.ToolCallTransition(context.Background(), p)
	if err != nil {
		t.Fatalf("%s -> %s: %v", from, to, err)
	}
	if c.Status != to || c.UpdatedAt != at {
		t.Fatalf("%s -> %s: got status %s updated_at %d", from, to, c.Status, c.UpdatedAt)
	}
	if store.ToolCallTerminal(to) {
		if c.EndedAt != at || c.DeadlineAt != 0 {
			t.Fatalf("%s -> %s: ended_at %d deadline_at %d, want %d and none", from, to, c.EndedAt, c.DeadlineAt, at)
		}
	} else if c.EndedAt != 0 {
		t.Fatalf("%s -> %s: ended_at %d on a non-terminal call", from, to, c.EndedAt)
	}
	if p.DeadlineAt != nil && !store.ToolCallTerminal(to) && c.DeadlineAt != *p.DeadlineAt {
		t.Fatalf("%s -> %s: deadline_at %d, want %d", from, to, c.DeadlineAt, *p.DeadlineAt)
	}
	if p.ApprovalID != nil && c.ApprovalID != *p.ApprovalID {
		t.Fatalf("%s -> %s: approval_id %q", from, to, c.ApprovalID)
	}
	for _, f := range []struct {
		name      string
		got, want json.RawMessage
	}{{"result", c.Result, p.Result}, {"error", c.Error, p.Error}, {"policy", c.Policy, p.Policy}} {
		if f.want != nil && !jsonEqual(f.got, f.want) {
			t.Fatalf("%s -> %s: %s = %s, want %s", from, to, f.name, f.got, f.want)
		}
	}
	return c
}

// pathTo is the shortest sequence of states from CREATED to target, found
// by walking store.ToolCallTransitions breadth first.
func pathTo(target string) []string {
	prev := map[string]string{store.ToolCallCreated: ""}
	queue := []string{store.ToolCallCreated}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur == target {
			break
		}
		for _, next := range store.ToolCallTransitions[cur] {
			if _, seen := prev[next]; !seen {
				prev[next] = cur
				queue = append(queue, next)
			}
		}
	}
	var path []string
	for s := target; s != store.ToolCallCreated; s = prev[s] {
		path = append([]string{s}, path...)
	}
	return path
}

// reach inserts a call and drives it to state along pathTo.
func reach(t *testing.T, s store.Queries, sessionID, runID, state string) *store.ToolCall {
	t.Helper()
	c := insertCall(t, s, sessionID, runID, "")
	from := store.ToolCallCreated
	for i, to := range pathTo(state) {
		c = step(t, s, c.ToolCallID, from, to, int64(20+i))
		from = to
	}
	return c
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

var allToolCallStatuses = []string{
	store.ToolCallCreated, store.ToolCallPolicyChecked, store.ToolCallBlocked, store.ToolCallWaitingApproval,
	store.ToolCallDispatched, store.ToolCallRunning, store.ToolCallWaitingClient, store.ToolCallSucceeded,
	store.ToolCallFailed, store.ToolCallRejected, store.ToolCallTimeout, store.ToolCallExpired, store.ToolCallCancelled,
}

func TestTools(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		if list, err := s.ToolList(ctx); err != nil || list == nil || len(list) != 0 {
			t.Fatalf("empty list: %v %v", list, err)
		}
		// Key order and spacing survive: the definition is opaque and a
		// schema's property order is what a model is shown.
		def1 := `{"tool_name":"b.tool","parameters":{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"number"}}}}`
		tr, created, err := s.ToolPut(ctx, &store.ToolPutParams{Name: "b.tool", Definition: json.RawMessage(def1), At: 1})
		if err != nil || !created || tr.CreatedAt != 1 || tr.UpdatedAt != 1 || string(tr.Definition) != def1 {
			t.Fatalf("create: %+v created=%v %v", tr, created, err)
		}
		def2 := `{"tool_name":"b.tool",  "kind":"client"}`
		tr, created, err = s.ToolPut(ctx, &store.ToolPutParams{Name: "b.tool", Definition: json.RawMessage(def2), At: 2})
		if err != nil || created || tr.CreatedAt != 1 || tr.UpdatedAt != 2 || string(tr.Definition) != def2 {
			t.Fatalf("replace: %+v created=%v %v", tr, created, err)
		}
		if _, _, err := s.ToolPut(ctx, &store.ToolPutParams{Name: "a.tool", Definition: json.RawMessage(def1), At: 3}); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.ToolPut(ctx, &store.ToolPutParams{Name: "c.tool", At: 3}); err == nil {
			t.Fatal("empty definition stored")
		}
		got, err := s.ToolGet(ctx, "b.tool")
		if err != nil || string(got.Definition) != def2 || got.Name != "b.tool" {
			t.Fatalf("get: %+v %v", got, err)
		}
		list, err := s.ToolList(ctx)
		if err != nil || len(list) != 2 || list[0].Name != "a.tool" || list[1].Name != "b.tool" || string(list[0].Definition) != def1 {
			t.Fatalf("list: %+v %v", list, err)
		}
		if err := s.ToolDelete(ctx, "b.tool"); err != nil {
			t.Fatal(err)
		}
		if err := s.ToolDelete(ctx, "b.tool"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("double delete: %v, want ErrNotFound", err)
		}
		if _, err := s.ToolGet(ctx, "b.tool"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get deleted: %v, want ErrNotFound", err)
		}
		if _, created, err := s.ToolPut(ctx, &store.ToolPutParams{Name: "b.tool", Definition: json.RawMessage(def1), At: 4}); err != nil || !created {
			t.Fatalf("re-create after delete: created=%v %v", created, err)
		}
	})
}

func TestToolPutConcurrentCreatesOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		var creates atomic.Int32
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Go(func() {
				_, created, err := s.ToolPut(context.Background(), &store.ToolPutParams{Name: "t", Definition: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), At: int64(i + 1)})
				if err != nil {
					t.Errorf("put: %v", err)
				}
				if created {
					creates.Add(1)
				}
			})
		}
		wg.Wait()
		if creates.Load() != 1 {
			t.Fatalf("%d puts reported creating the tool, want 1", creates.Load())
		}
	})
}

func TestToolCallInsertAndGet(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		p := callParams(sid, rid, "k1")
		c, err := s.ToolCallInsert(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		want := &store.ToolCall{
			ToolCallID: p.ToolCallID, RunID: rid, SessionID: sid, AgentID: "a1", ToolName: "payments.transfer",
			Kind: store.ToolKindServer, Status: store.ToolCallCreated, IdempotencyKey: "k1", ArgsHash: "h1",
			TimeoutMS: 60000, CreatedAt: 10, UpdatedAt: 10,
		}
		if !jsonEqual(c.Args, p.Args) {
			t.Fatalf("args %s", c.Args)
		}
		c.Args = nil
		if !reflect.DeepEqual(c, want) {
			t.Fatalf("insert returned\n%+v\nwant\n%+v", c, want)
		}
		got, err := s.ToolCallGet(ctx, p.ToolCallID)
		if err != nil {
			t.Fatal(err)
		}
		got.Args = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("get returned\n%+v\nwant\n%+v", got, want)
		}
		if _, err := s.ToolCallGet(ctx, "tc_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing: %v, want ErrNotFound", err)
		}
		// No args store {}; a taken id without a key is a conflict.
		p2 := callParams(sid, rid, "")
		p2.Args = nil
		c2, err := s.ToolCallInsert(ctx, p2)
		if err != nil || !jsonEqual(c2.Args, json.RawMessage(`{}`)) {
			t.Fatalf("no args: %+v %v", c2, err)
		}
		if _, err := s.ToolCallInsert(ctx, p2); !errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrDuplicate) {
			t.Fatalf("taken id: %v, want ErrConflict", err)
		}
		if _, err := s.ToolCallInsert(ctx, callParams(sid, "run_missing", "")); err == nil {
			t.Fatal("tool call of an unknown run inserted")
		}
		bad := callParams(sid, rid, "")
		bad.Kind = "remote"
		if _, err := s.ToolCallInsert(ctx, bad); err == nil {
			t.Fatal("unknown kind inserted")
		}
	})
}

func TestToolCallIdempotencyKey(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		first := insertCall(t, s, sid, rid, "step-1")
		retry := callParams(sid, rid, "step-1")
		retry.ArgsHash = "h2"
		got, err := s.ToolCallInsert(ctx, retry)
		if !errors.Is(err, store.ErrDuplicate) || errors.Is(err, store.ErrConflict) {
			t.Fatalf("same key: %v, want ErrDuplicate (and not ErrConflict)", err)
		}
		if got == nil || got.ToolCallID != first.ToolCallID || got.ArgsHash != "h1" {
			t.Fatalf("same key returned %+v, want the existing call %s with its own args hash", got, first.ToolCallID)
		}
		// The key is the run's: another run (same session even) gets its own call.
		rid2 := ids.New("run")
		if _, err := s.RunInsert(ctx, &store.RunInsertParams{RunID: rid2, SessionID: sid, AgentID: "a2", ParentRunID: rid, Owner: "i1", StartedAt: 2}); err != nil {
			t.Fatal(err)
		}
		other := insertCall(t, s, sid, rid2, "step-1")
		if other.ToolCallID == first.ToolCallID {
			t.Fatal("same key in another run returned the first run's call")
		}
		// Read back by its key, within its run only.
		if got, err := s.ToolCallGetByKey(ctx, rid, "step-1"); err != nil || got.ToolCallID != first.ToolCallID {
			t.Fatalf("get by key: %+v %v, want %s", got, err, first.ToolCallID)
		}
		if got, err := s.ToolCallGetByKey(ctx, rid2, "step-1"); err != nil || got.ToolCallID != other.ToolCallID {
			t.Fatalf("get by key in the other run: %+v %v, want %s", got, err, other.ToolCallID)
		}
		for _, key := range []string{"step-2", ""} {
			if _, err := s.ToolCallGetByKey(ctx, rid, key); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("get by key %q: %v, want ErrNotFound", key, err)
			}
		}
		// No key, no deduplication.
		insertCall(t, s, sid, rid, "")
		insertCall(t, s, sid, rid, "")
		active, _ := s.ToolCallListActiveByRun(ctx, rid)
		if len(active) != 3 {
			t.Fatalf("run has %d calls, want 3", len(active))
		}
		// A duplicate inside a transaction leaves it usable (PostgreSQL aborts
		// a transaction on a unique violation; ON CONFLICT DO NOTHING does not).
		err = s.InTx(ctx, func(tx store.Queries) error {
			dup, err := tx.ToolCallInsert(ctx, callParams(sid, rid, "step-1"))
			if !errors.Is(err, store.ErrDuplicate) || dup.ToolCallID != first.ToolCallID {
				return fmt.Errorf("duplicate in tx: %+v %v", dup, err)
			}
			_, err = tx.ToolCallTransition(ctx, stepParams(dup.ToolCallID, store.ToolCallCreated, store.ToolCallPolicyChecked, 30))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

func TestToolCallIdempotencyKeyConcurrent(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		const n = 100
		var created atomic.Int32
		seen := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				c, err := s.ToolCallInsert(ctx, callParams(sid, rid, "one-key"))
				switch {
				case err == nil:
					created.Add(1)
				case !errors.Is(err, store.ErrDuplicate):
					t.Errorf("insert %d: %v", i, err)
					return
				}
				seen[i] = c.ToolCallID
			})
		}
		wg.Wait()
		if created.Load() != 1 {
			t.Fatalf("%d inserts created a call, want exactly 1", created.Load())
		}
		for i := range seen {
			if seen[i] != seen[0] {
				t.Fatalf("inserter %d saw %s, inserter 0 saw %s", i, seen[i], seen[0])
			}
		}
		active, _ := s.ToolCallListActiveByRun(ctx, rid)
		if len(active) != 1 || active[0].ToolCallID != seen[0] {
			t.Fatalf("run has %d calls, want 1", len(active))
		}
	})
}

// TestToolCallPaths walks the paths of DESIGN §8 end to end.
func TestToolCallPaths(t *testing.T) {
	const (
		C  = store.ToolCallCreated
		PC = store.ToolCallPolicyChecked
		WA = store.ToolCallWaitingApproval
		D  = store.ToolCallDispatched
		R  = store.ToolCallRunning
		WC = store.ToolCallWaitingClient
	)
	paths := map[string][]string{
		"server succeeded":   {C, PC, D, R, store.ToolCallSucceeded},
		"server failed":      {C, PC, D, R, store.ToolCallFailed},
		"server timeout":     {C, PC, D, R, store.ToolCallTimeout},
		"client succeeded":   {C, PC, D, WC, store.ToolCallSucceeded},
		"client failed":      {C, PC, D, WC, store.ToolCallFailed},
		"client timeout":     {C, PC, D, WC, store.ToolCallTimeout},
		"client offline":     {C, PC, D, store.ToolCallFailed},
		"approved and run":   {C, PC, WA, D, R, store.ToolCallSucceeded},
		"approved client":    {C, PC, WA, D, WC, store.ToolCallSucceeded},
		"rejected":           {C, PC, WA, store.ToolCallRejected},
		"expired":            {C, PC, WA, store.ToolCallExpired},
		"blocked":            {C, PC, store.ToolCallBlocked},
		"cancelled created":  {C, store.ToolCallCancelled},
		"cancelled checked":  {C, PC, store.ToolCallCancelled},
		"cancelled approval": {C, PC, WA, store.ToolCallCancelled},
		"cancelled dispatch": {C, PC, D, store.ToolCallCancelled},
		"cancelled running":  {C, PC, D, R, store.ToolCallCancelled},
		"cancelled client":   {C, PC, D, WC, store.ToolCallCancelled},
	}
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		sid, rid := newRun(t, s)
		for name, path := range paths {
			c := insertCall(t, s, sid, rid, "")
			for i := 1; i < len(path); i++ {
				c = step(t, s, c.ToolCallID, path[i-1], path[i], int64(100+i))
			}
			if !store.ToolCallTerminal(c.Status) {
				t.Fatalf("%s: ended in %s", name, c.Status)
			}
			wantAttempts := 0
			if slices.Contains(path, R) {
				wantAttempts = 1
			}
			if c.Attempts != wantAttempts {
				t.Fatalf("%s: attempts %d, want %d", name, c.Attempts, wantAttempts)
			}
		}
	})
}

// TestToolCallTransitionMatrix checks every edge of the state machine from
// a call in its source state, and that from every state each edge that does
// not start there is refused with the current row and ErrConflict and
// changes nothing.
func TestToolCallTransitionMatrix(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		for from, tos := range store.ToolCallTransitions {
			for _, to := range tos {
				c := reach(t, s, sid, rid, from)
				step(t, s, c.ToolCallID, from, to, 500)
			}
		}
		for _, state := range allToolCallStatuses {
			c := reach(t, s, sid, rid, state)
			before, _ := s.ToolCallGet(ctx, c.ToolCallID)
			for from, tos := range store.ToolCallTransitions {
				if from == state {
					continue
				}
				for _, to := range tos {
					cur, err := s.ToolCallTransition(ctx, stepParams(c.ToolCallID, from, to, 900))
					if !errors.Is(err, store.ErrConflict) || cur == nil || !reflect.DeepEqual(cur, before) {
						t.Fatalf("call in %s, %s -> %s: %+v %v, want the current row and ErrConflict", state, from, to, cur, err)
					}
				}
			}
			// Every state change out of a terminal state is not even an edge.
			if store.ToolCallTerminal(state) {
				for _, to := range allToolCallStatuses {
					if _, err := s.ToolCallTransition(ctx, stepParams(c.ToolCallID, state, to, 900)); err == nil || errors.Is(err, store.ErrConflict) {
						t.Fatalf("%s -> %s: %v, want a refusal that is not a conflict", state, to, err)
					}
				}
			}
			after, _ := s.ToolCallGet(ctx, c.ToolCallID)
			if !reflect.DeepEqual(after, before) {
				t.Fatalf("refused transitions changed the call in %s:\n%+v\n%+v", state, before, after)
			}
		}
		// The example of the brief: a finished call cannot be claimed again.
		done := reach(t, s, sid, rid, store.ToolCallSucceeded)
		cur, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: done.ToolCallID, From: []string{store.ToolCallDispatched},
			Status: store.ToolCallRunning, At: 1000, IncAttempts: true})
		if !errors.Is(err, store.ErrConflict) || cur.Status != store.ToolCallSucceeded || cur.Attempts != 1 || cur.UpdatedAt != done.UpdatedAt {
			t.Fatalf("SUCCEEDED -> RUNNING: %+v %v", cur, err)
		}
		if _, err := s.ToolCallTransition(ctx, stepParams("tc_missing", store.ToolCallDispatched, store.ToolCallRunning, 1)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unknown call: %v, want ErrNotFound", err)
		}
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: done.ToolCallID, Status: store.ToolCallCancelled, At: 1}); err == nil {
			t.Fatal("transition with empty From accepted")
		}
	})
}

// TestToolCallWaitingStatesNeedDeadline: the schema refuses a waiting call
// without a deadline, so a forgotten deadline is an error at once rather
// than a call that waits forever.
func TestToolCallWaitingStatesNeedDeadline(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		c := reach(t, s, sid, rid, store.ToolCallPolicyChecked)
		zero := int64(0)
		for _, p := range []*store.ToolCallTransitionParams{
			{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallDispatched, At: 50},
			{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallDispatched, At: 50, DeadlineAt: &zero},
			// WAITING_APPROVAL needs its approval id too.
			{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallWaitingApproval, At: 50, DeadlineAt: new(int64(99))},
		} {
			if _, err := s.ToolCallTransition(ctx, p); err == nil || errors.Is(err, store.ErrConflict) {
				t.Fatalf("%+v: %v, want a constraint error", p, err)
			}
		}
		if got, _ := s.ToolCallGet(ctx, c.ToolCallID); !reflect.DeepEqual(got, c) {
			t.Fatalf("refused transitions changed the call: %+v", got)
		}
	})
}

// TestApprovalRace: 50 racers decide one approval at once, each deciding
// and moving the tool call in one transaction as the service will. Exactly
// one decision is recorded, the call follows it, and whoever claims the
// dispatched call to run, it runs once.
func TestApprovalRace(t *testing.T) {
	decisions := map[string]struct {
		call string
		at   int64 // before or after the expiry at 1000
	}{
		store.ApprovalApproved: {store.ToolCallDispatched, 500},
		store.ApprovalRejected: {store.ToolCallRejected, 500},
		store.ApprovalExpired:  {store.ToolCallExpired, 1500},
	}
	mixed := []string{store.ApprovalApproved, store.ApprovalRejected, store.ApprovalExpired}
	for _, tc := range []struct {
		name  string
		kinds []string
	}{{"mixed", mixed}, {"all approve", []string{store.ApprovalApproved}}} {
		t.Run(tc.name, func(t *testing.T) {
			testdb.Each(t, func(t *testing.T, dialect string) {
				s := testdb.Open(t, dialect)
				ctx := context.Background()
				sid, rid := newRun(t, s)
				call, apr := waitingApproval(t, s, sid, rid, 1000)
				const racers = 50
				var decided, moved atomic.Int32
				var wg sync.WaitGroup
				for i := range racers {
					wg.Go(func() {
						kind := tc.kinds[i%len(tc.kinds)]
						d := decisions[kind]
						who := fmt.Sprintf("racer-%d", i)
						err := s.InTx(ctx, func(tx store.Queries) error {
							a, err := tx.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: apr.ApprovalID, Status: kind, DecidedBy: who, Reason: "r", At: d.at})
							if err != nil {
								if !errors.Is(err, store.ErrConflict) || a == nil || a.Status == store.ApprovalPending {
									t.Errorf("%s %s: %+v %v, want the recorded decision and ErrConflict", who, kind, a, err)
								}
								return err
							}
							decided.Add(1)
							p := &store.ToolCallTransitionParams{ID: call.ToolCallID, From: []string{store.ToolCallWaitingApproval}, Status: d.call, At: d.at}
							if d.call == store.ToolCallDispatched {
								p.DeadlineAt = new(d.at + 60000)
							}
							if _, err := tx.ToolCallTransition(ctx, p); err != nil {
								t.Errorf("%s: decision won but the call did not move: %v", who, err)
								return err
							}
							moved.Add(1)
							return nil
						})
						if err != nil && !errors.Is(err, store.ErrConflict) {
							t.Errorf("%s: %v", who, err)
						}
					})
				}
				wg.Wait()
				if decided.Load() != 1 || moved.Load() != 1 {
					t.Fatalf("%d decisions and %d call moves won, want exactly 1 each", decided.Load(), moved.Load())
				}
				a, _ := s.ApprovalGet(ctx, apr.ApprovalID)
				c, _ := s.ToolCallGet(ctx, call.ToolCallID)
				if want := decisions[a.Status].call; c.Status != want || a.DecidedAt != decisions[a.Status].at || !strings.HasPrefix(a.DecidedBy, "racer-") {
					t.Fatalf("approval %+v but call %s", a, c.Status)
				}
				// Now everyone who thinks the call may run tries to claim it.
				runs := claimRace(t, s, call.ToolCallID, 20)
				wantRuns := int32(0)
				if a.Status == store.ApprovalApproved {
					wantRuns = 1
				}
				if runs != wantRuns {
					t.Fatalf("approval %s: the call was claimed %d times, want %d", a.Status, runs, wantRuns)
				}
			})
		})
	}
}

// waitingApproval makes a call waiting for a fresh approval expiring at
// expiresAt, the way the service does: approval and transition in one
// transaction. (No t.Fatal inside InTx: it would exit the goroutine with the
// transaction open.)
func waitingApproval(t *testing.T, s store.Store, sid, rid string, expiresAt int64) (*store.ToolCall, *store.Approval) {
	t.Helper()
	ctx := context.Background()
	c := reach(t, s, sid, rid, store.ToolCallPolicyChecked)
	var call *store.ToolCall
	var apr *store.Approval
	err := s.InTx(ctx, func(tx store.Queries) error {
		var err error
		apr, err = tx.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("apr"), ToolCallID: c.ToolCallID, RunID: rid, SessionID: sid,
			ToolName: c.ToolName, ArgsSummary: `payments.transfer(amount=150, to="bob")`, ExpiresAt: expiresAt, At: 30})
		if err != nil {
			return err
		}
		call, err = tx.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked},
			Status: store.ToolCallWaitingApproval, At: 30, ApprovalID: &apr.ApprovalID, DeadlineAt: &expiresAt})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return call, apr
}

// claimRace has n claimers race DISPATCHED → RUNNING on one call and
// returns how many won.
func claimRace(t *testing.T, s store.Store, id string, n int) int32 {
	t.Helper()
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := s.ToolCallTransition(context.Background(), &store.ToolCallTransitionParams{ID: id, From: []string{store.ToolCallDispatched},
				Status: store.ToolCallRunning, At: 2000, IncAttempts: true})
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, store.ErrConflict) || c == nil || c.Status == store.ToolCallDispatched:
				t.Errorf("claim: %+v %v", c, err)
			}
		})
	}
	wg.Wait()
	if c, _ := s.ToolCallGet(context.Background(), id); c.Attempts != int(wins.Load()) {
		t.Errorf("attempts %d after %d winning claims", c.Attempts, wins.Load())
	}
	return wins.Load()
}

func TestToolCallClaimToRunOnce(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		sid, rid := newRun(t, s)
		c := reach(t, s, sid, rid, store.ToolCallDispatched)
		if wins := claimRace(t, s, c.ToolCallID, 20); wins != 1 {
			t.Fatalf("%d claims won, want exactly 1", wins)
		}
		got, _ := s.ToolCallGet(context.Background(), c.ToolCallID)
		if got.Status != store.ToolCallRunning || got.Attempts != 1 || got.DeadlineAt != c.DeadlineAt {
			t.Fatalf("after the claim: %+v (a claim without DeadlineAt keeps the deadline %d)", got, c.DeadlineAt)
		}
	})
}

func TestToolCallDeadlines(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		move := func(c *store.ToolCall, to string, deadline int64) *store.ToolCall {
			t.Helper()
			p := stepParams(c.ToolCallID, c.Status, to, c.UpdatedAt+1)
			p.DeadlineAt = &deadline
			out, err := s.ToolCallTransition(ctx, p)
			if err != nil {
				t.Fatalf("%s -> %s: %v", c.Status, to, err)
			}
			return out
		}
		callIDs := func(cs []*store.ToolCall) []string {
			out := []string{}
			for _, c := range cs {
				out = append(out, c.ToolCallID)
			}
			return out
		}
		checked := func() *store.ToolCall { return reach(t, s, sid, rid, store.ToolCallPolicyChecked) }
		approval := move(checked(), store.ToolCallWaitingApproval, 300) // approval expiry
		running := move(move(checked(), store.ToolCallDispatched, 150), store.ToolCallRunning, 200)
		client := move(move(checked(), store.ToolCallDispatched, 400), store.ToolCallWaitingClient, 400)
		undated := checked()
		finished := move(move(checked(), store.ToolCallDispatched, 100), store.ToolCallRunning, 100)
		finished = step(t, s, finished.ToolCallID, store.ToolCallRunning, store.ToolCallSucceeded, 60)
		if finished.DeadlineAt != 0 || undated.DeadlineAt != 0 || running.DeadlineAt != 200 {
			t.Fatalf("deadlines: finished %d undated %d running %d", finished.DeadlineAt, undated.DeadlineAt, running.DeadlineAt)
		}
		for _, tc := range []struct {
			now   int64
			limit int
			want  []string
		}{
			{99, 0, []string{}},
			{200, 0, []string{running.ToolCallID}},
			{300, 0, []string{running.ToolCallID, approval.ToolCallID}},
			{10000, 0, []string{running.ToolCallID, approval.ToolCallID, client.ToolCallID}},
			{10000, 2, []string{running.ToolCallID, approval.ToolCallID}},
		} {
			due, err := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: tc.now, Limit: tc.limit})
			if err != nil || !slices.Equal(callIDs(due), tc.want) {
				t.Fatalf("due at %d (limit %d): %v %v, want %v", tc.now, tc.limit, callIDs(due), err, tc.want)
			}
		}
		// The sweeper listed the approval at 300, but it was approved and
		// dispatched with a fresh tool timeout before the sweeper acted: the
		// due guard leaves it alone.
		dispatched := move(approval, store.ToolCallDispatched, 5000)
		cur, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: approval.ToolCallID,
			From: []string{store.ToolCallDispatched}, Status: store.ToolCallTimeout, At: 301, IfDueBy: 300})
		if !errors.Is(err, store.ErrConflict) || !reflect.DeepEqual(cur, dispatched) {
			t.Fatalf("sweeper on a moved deadline: %+v %v", cur, err)
		}
		// Due ones time out, and are then no longer due.
		for _, c := range []*store.ToolCall{running, client} {
			out, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{c.Status},
				Status: store.ToolCallTimeout, At: 10000, IfDueBy: 10000, Error: json.RawMessage(`{"code":"timeout"}`)})
			if err != nil || out.DeadlineAt != 0 || out.EndedAt != 10000 {
				t.Fatalf("timeout %s: %+v %v", c.Status, out, err)
			}
		}
		due, _ := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: 1 << 60})
		if !slices.Equal(callIDs(due), []string{dispatched.ToolCallID}) {
			t.Fatalf("due after the sweep: %v", callIDs(due))
		}
	})
}

func TestToolCallListActiveByRun(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		a := reach(t, s, sid, rid, store.ToolCallWaitingApproval)
		reach(t, s, sid, rid, store.ToolCallFailed)
		b := reach(t, s, sid, rid, store.ToolCallWaitingClient)
		osid, orid := newRun(t, s)
		reach(t, s, osid, orid, store.ToolCallRunning)
		active, err := s.ToolCallListActiveByRun(ctx, rid)
		if err != nil || len(active) != 2 || active[0].ToolCallID != a.ToolCallID || active[1].ToolCallID != b.ToolCallID {
			t.Fatalf("active: %+v %v", active, err)
		}
		// The cancel cascade leaves nothing active.
		for _, c := range active {
			if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: store.ToolCallActiveStatuses,
				Status: store.ToolCallCancelled, At: 99}); err != nil {
				t.Fatal(err)
			}
		}
		if active, err := s.ToolCallListActiveByRun(ctx, rid); err != nil || active == nil || len(active) != 0 {
			t.Fatalf("after cancel: %+v %v", active, err)
		}
		if other, _ := s.ToolCallListActiveByRun(ctx, orid); len(other) != 1 {
			t.Fatalf("other run: %d active", len(other))
		}
	})
}

func TestToolCallListPendingClient(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		a := reach(t, s, sid, rid, store.ToolCallWaitingClient)
		reach(t, s, sid, rid, store.ToolCallRunning)
		reach(t, s, sid, rid, store.ToolCallSucceeded)
		b := reach(t, s, sid, rid, store.ToolCallWaitingClient)
		osid, orid := newRun(t, s)
		reach(t, s, osid, orid, store.ToolCallWaitingClient)
		got, err := s.ToolCallListPendingClient(ctx, sid)
		if err != nil || len(got) != 2 || got[0].ToolCallID != a.ToolCallID || got[1].ToolCallID != b.ToolCallID {
			t.Fatalf("pending client calls: %+v %v", got, err)
		}
		if got, err := s.ToolCallListPendingClient(ctx, "ses_none"); err != nil || got == nil || len(got) != 0 {
			t.Fatalf("unknown session: %+v %v", got, err)
		}
	})
}

func TestApprovals(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		call, apr := waitingApproval(t, s, sid, rid, 1000)
		want := &store.Approval{ApprovalID: apr.ApprovalID, ToolCallID: call.ToolCallID, RunID: rid, SessionID: sid,
			ToolName: "payments.transfer", Status: store.ApprovalPending, ArgsSummary: `payments.transfer(amount=150, to="bob")`,
			ExpiresAt: 1000, CreatedAt: 30}
		if got, err := s.ApprovalGet(ctx, apr.ApprovalID); err != nil || !reflect.DeepEqual(got, want) || !reflect.DeepEqual(apr, want) {
			t.Fatalf("get: %+v %v\nwant %+v", got, err, want)
		}
		if _, err := s.ApprovalGet(ctx, "apr_missing"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("missing: %v", err)
		}
		second := &store.ApprovalInsertParams{ApprovalID: ids.New("apr"), ToolCallID: call.ToolCallID, RunID: rid, SessionID: sid, ToolName: "x", ExpiresAt: 5, At: 5}
		if _, err := s.ApprovalInsert(ctx, second); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("second approval for one call: %v, want ErrConflict", err)
		}
		if _, err := s.ApprovalInsert(ctx, &store.ApprovalInsertParams{ApprovalID: ids.New("apr"), ToolCallID: "tc_missing", RunID: rid, SessionID: sid, ExpiresAt: 5, At: 5}); err == nil {
			t.Fatal("approval for an unknown tool call inserted")
		}

		// Refused before anything: not a decision; not yet expired; too late.
		for _, p := range []*store.ApprovalDecideParams{
			{ID: apr.ApprovalID, Status: store.ApprovalPending, At: 500},
			{ID: apr.ApprovalID, Status: "MAYBE", At: 500},
		} {
			if _, err := s.ApprovalDecide(ctx, p); err == nil || errors.Is(err, store.ErrConflict) {
				t.Fatalf("decide %s: %v, want a refusal that is not a conflict", p.Status, err)
			}
		}
		for _, p := range []*store.ApprovalDecideParams{
			{ID: apr.ApprovalID, Status: store.ApprovalExpired, At: 999},
			{ID: apr.ApprovalID, Status: store.ApprovalApproved, At: 1000},
			{ID: apr.ApprovalID, Status: store.ApprovalRejected, At: 1001},
		} {
			cur, err := s.ApprovalDecide(ctx, p)
			if !errors.Is(err, store.ErrConflict) || !reflect.DeepEqual(cur, want) {
				t.Fatalf("decide %s at %d: %+v %v, want the pending row and ErrConflict", p.Status, p.At, cur, err)
			}
		}
		approved, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: apr.ApprovalID, Status: store.ApprovalApproved, DecidedBy: "user:u1", Reason: "ok", At: 999})
		if err != nil || approved.Status != store.ApprovalApproved || approved.DecidedBy != "user:u1" || approved.Reason != "ok" || approved.DecidedAt != 999 {
			t.Fatalf("approve: %+v %v", approved, err)
		}
		// The same decision again, or another one: the recorded decision and
		// ErrConflict (the service replays the first, answers 409 to the second).
		for _, st := range []string{store.ApprovalApproved, store.ApprovalRejected, store.ApprovalCancelled} {
			cur, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: apr.ApprovalID, Status: st, DecidedBy: "admin", At: 999})
			if !errors.Is(err, store.ErrConflict) || !reflect.DeepEqual(cur, approved) {
				t.Fatalf("decide %s after approval: %+v %v", st, cur, err)
			}
		}
		if _, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: "apr_missing", Status: store.ApprovalApproved, At: 1}); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("decide unknown: %v", err)
		}

		// Expiry and cancellation; lists.
		_, exp := waitingApproval(t, s, sid, rid, 2000)
		_, early := waitingApproval(t, s, sid, rid, 1500)
		osid, orid := newRun(t, s)
		_, other := waitingApproval(t, s, osid, orid, 3000)
		if got, err := s.ApprovalListExpired(ctx, 1499, 0); err != nil || len(got) != 0 {
			t.Fatalf("expired at 1499: %+v %v", got, err)
		}
		got, err := s.ApprovalListExpired(ctx, 2000, 0)
		if err != nil || len(got) != 2 || got[0].ApprovalID != early.ApprovalID || got[1].ApprovalID != exp.ApprovalID {
			t.Fatalf("expired at 2000: %+v %v", got, err)
		}
		if got, _ := s.ApprovalListExpired(ctx, 1<<60, 1); len(got) != 1 || got[0].ApprovalID != early.ApprovalID {
			t.Fatalf("expired, limit 1: %+v", got)
		}
		e, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: exp.ApprovalID, Status: store.ApprovalExpired, DecidedBy: "system", At: 2000})
		if err != nil || e.Status != store.ApprovalExpired || e.DecidedAt != 2000 {
			t.Fatalf("expire: %+v %v", e, err)
		}
		c, err := s.ApprovalDecide(ctx, &store.ApprovalDecideParams{ID: early.ApprovalID, Status: store.ApprovalCancelled, DecidedBy: "system", Reason: "run cancelled", At: 5000})
		if err != nil || c.Status != store.ApprovalCancelled {
			t.Fatalf("cancel after expiry time: %+v %v", c, err)
		}
		if got, _ := s.ApprovalListExpired(ctx, 1<<60, 0); len(got) != 1 || got[0].ApprovalID != other.ApprovalID {
			t.Fatalf("expired after decisions: %+v", got)
		}
		approvalIDs := func(as []*store.Approval) []string {
			out := []string{}
			for _, a := range as {
				out = append(out, a.ApprovalID)
			}
			return out
		}
		for _, tc := range []struct {
			p    store.ApprovalListParams
			want []string
		}{
			{store.ApprovalListParams{}, []string{apr.ApprovalID, exp.ApprovalID, early.ApprovalID, other.ApprovalID}},
			{store.ApprovalListParams{Limit: 2}, []string{apr.ApprovalID, exp.ApprovalID}},
			{store.ApprovalListParams{Status: store.ApprovalPending}, []string{other.ApprovalID}},
			{store.ApprovalListParams{Status: store.ApprovalApproved}, []string{apr.ApprovalID}},
			{store.ApprovalListParams{SessionID: sid}, []string{apr.ApprovalID, exp.ApprovalID, early.ApprovalID}},
			{store.ApprovalListParams{SessionID: sid, Status: store.ApprovalExpired}, []string{exp.ApprovalID}},
			{store.ApprovalListParams{SessionID: osid, Status: store.ApprovalExpired}, []string{}},
		} {
			got, err := s.ApprovalList(ctx, &tc.p)
			if err != nil || !slices.Equal(approvalIDs(got), tc.want) {
				t.Fatalf("list %+v: %v %v, want %v", tc.p, approvalIDs(got), err, tc.want)
			}
		}
	})
}

// openRaw opens a fresh store and a second, plain connection to the same
// database, to write rows the store would never write.
func openRaw(t *testing.T, dialect string) (store.Store, *sql.DB) {
	t.Helper()
	dsn := testdb.DSN(t, dialect)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s store.Store
	var err error
	driver := "pgx"
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		s, err = sqlite.Open(ctx, path)
		driver, dsn = "sqlite", "file:"+path+"?_pragma=busy_timeout(10000)"
	} else {
		s, err = postgres.Open(ctx, dsn, postgres.Options{})
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	raw, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	return s, raw
}

// TestToolCheckConstraints writes rows past the store to show the schema
// itself holds the invariants: each broken row differs from a valid one in
// one column.
func TestToolCheckConstraints(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s, raw := openRaw(t, dialect)
		sid, rid := newRun(t, s)
		n := 0
		insertCallRow := func(set map[string]string) error {
			n++
			cols := map[string]string{
				"tool_call_id": fmt.Sprintf("'tc_raw_%d'", n), "run_id": "'" + rid + "'", "session_id": "'s'", "agent_id": "'a'",
				"tool_name": "'t'", "kind": "'server'", "status": "'RUNNING'", "args": `'{}'`, "args_hash": "''",
				"deadline_at": "100", "timeout_ms": "1000", "created_at": "1", "updated_at": "1", "ended_at": "NULL",
			}
			for k, v := range set {
				cols[k] = v
			}
			var names, vals []string
			for k, v := range cols {
				names = append(names, k)
				vals = append(vals, v)
			}
			_, err := raw.Exec(`INSERT INTO tool_calls (` + strings.Join(names, ", ") + `) VALUES (` + strings.Join(vals, ", ") + `)`)
			return err
		}
		if err := insertCallRow(nil); err != nil {
			t.Fatalf("valid tool call row refused: %v", err)
		}
		if err := insertCallRow(map[string]string{"status": "'SUCCEEDED'", "deadline_at": "NULL", "ended_at": "5"}); err != nil {
			t.Fatalf("valid finished row refused: %v", err)
		}
		for name, set := range map[string]map[string]string{
			"unknown status":                {"status": "'PAUSED'"},
			"unknown kind":                  {"kind": "'remote'"},
			"terminal without ended_at":     {"status": "'SUCCEEDED'", "deadline_at": "NULL"},
			"ended_at on a live call":       {"ended_at": "5"},
			"waiting without deadline":      {"status": "'WAITING_CLIENT'", "deadline_at": "NULL"},
			"ended with a deadline":         {"status": "'FAILED'", "ended_at": "5"},
			"waiting approval, no approval": {"status": "'WAITING_APPROVAL'"},
			"zero timeout":                  {"timeout_ms": "0"},
			"negative attempts":             {"attempts": "-1"},
		} {
			if err := insertCallRow(set); err == nil {
				t.Errorf("%s: row accepted", name)
			}
		}
		if err := insertCallRow(map[string]string{"tool_call_id": "'tc_k1'", "idempotency_key": "'k'"}); err != nil {
			t.Fatal(err)
		}
		if err := insertCallRow(map[string]string{"idempotency_key": "'k'"}); err == nil {
			t.Error("second call with one key in one run accepted")
		}
		// Each approval row gets a call of its own (tool_call_id is unique).
		insertApprovalRow := func(set map[string]string) error {
			cols := map[string]string{
				"approval_id": "'" + ids.New("apr") + "'", "tool_call_id": "'" + insertCall(t, s, sid, rid, "").ToolCallID + "'", "run_id": "'" + rid + "'",
				"session_id": "'s'", "tool_name": "'t'", "status": "'PENDING'", "expires_at": "100", "decided_at": "NULL", "created_at": "1",
			}
			for k, v := range set {
				cols[k] = v
			}
			var names, vals []string
			for k, v := range cols {
				names = append(names, k)
				vals = append(vals, v)
			}
			_, err := raw.Exec(`INSERT INTO approvals (` + strings.Join(names, ", ") + `) VALUES (` + strings.Join(vals, ", ") + `)`)
			return err
		}
		first := insertCall(t, s, sid, rid, "")
		if err := insertApprovalRow(map[string]string{"tool_call_id": "'" + first.ToolCallID + "'"}); err != nil {
			t.Fatalf("valid approval row refused: %v", err)
		}
		for name, set := range map[string]map[string]string{
			"unknown status":        {"status": "'MAYBE'"},
			"pending with decision": {"decided_at": "5"},
			"decided without time":  {"status": "'APPROVED'"},
			"second for one call":   {"tool_call_id": "'" + first.ToolCallID + "'"},
		} {
			if err := insertApprovalRow(set); err == nil {
				t.Errorf("approval %s: row accepted", name)
			}
		}
	})
}

// A call inserted with its policy decision is POLICY_CHECKED at once, and a
// transition Via a state checks both edges and lands in one statement
// (issue 13: the invoke of an allowed server tool).
func TestToolCallInsertDecidedAndVia(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		p := callParams(sid, rid, "")
		p.Policy = json.RawMessage(`{"decision":"allow","rule":"default"}`)
		c, err := s.ToolCallInsert(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != store.ToolCallPolicyChecked || !jsonEqual(c.Policy, p.Policy) {
			t.Fatalf("inserted with a policy: %s %s", c.Status, c.Policy)
		}
		// POLICY_CHECKED → RUNNING is not an edge; through DISPATCHED it is.
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallRunning, At: 11}); err == nil {
			t.Fatal("POLICY_CHECKED → RUNNING without Via was accepted")
		}
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Via: store.ToolCallWaitingApproval, Status: store.ToolCallRunning, At: 11}); err == nil {
			t.Fatal("a Via that is not an edge to the target was accepted")
		}
		d := int64(5000)
		got, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Via: store.ToolCallDispatched, Status: store.ToolCallRunning, At: 12, DeadlineAt: &d, IncAttempts: true})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status != store.ToolCallRunning || got.Attempts != 1 || got.DeadlineAt != 5000 || got.UpdatedAt != 12 {
			t.Fatalf("after the transition via DISPATCHED: %+v", got)
		}
		// The guard still holds: a second claim finds it RUNNING.
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallPolicyChecked}, Via: store.ToolCallDispatched, Status: store.ToolCallRunning, At: 13, IncAttempts: true}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a second claim: %v", err)
		}
	})
}

// An allowed call can be inserted already dispatched and claimed: the row
// a transition through DISPATCHED to RUNNING would leave, and no second
// claim can take it.
func TestToolCallInsertClaimed(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		sid, rid := newRun(t, s)
		p := callParams(sid, rid, "k1")
		p.Policy = json.RawMessage(`{"decision":"allow","rule":"default"}`)
		p.ClaimDeadlineAt = p.At + 5000
		c, err := s.ToolCallInsert(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.ToolCallGet(ctx, c.ToolCallID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*store.ToolCall{c, got} {
			if r.Status != store.ToolCallRunning || r.Attempts != 1 || r.DeadlineAt != p.At+5000 || r.UpdatedAt != p.At || r.EndedAt != 0 {
				t.Fatalf("inserted claimed: %+v", r)
			}
		}
		if _, err := s.ToolCallTransition(ctx, &store.ToolCallTransitionParams{ID: c.ToolCallID, From: []string{store.ToolCallDispatched}, Status: store.ToolCallRunning, At: p.At + 1, IncAttempts: true}); !errors.Is(err, store.ErrConflict) {
			t.Fatalf("a claim of the claimed call: %v", err)
		}
		// Found by the deadline sweep like any running call.
		due, err := s.ToolCallListDue(ctx, &store.ToolCallListDueParams{Now: p.At + 5000, Limit: 10})
		if err != nil || len(due) != 1 || due[0].ToolCallID != c.ToolCallID {
			t.Fatalf("due at its deadline: %v, %v", due, err)
		}
		// The same key again is the same call, unclaimed twice.
		p2 := callParams(sid, rid, "k1")
		p2.Policy, p2.ClaimDeadlineAt = p.Policy, p.At+9000
		dup, err := s.ToolCallInsert(ctx, p2)
		if !errors.Is(err, store.ErrDuplicate) || dup.ToolCallID != c.ToolCallID || dup.Attempts != 1 {
			t.Fatalf("a duplicate key: %+v, %v", dup, err)
		}
		// Without a policy the claim is ignored: a CREATED call is not run.
		p3 := callParams(sid, rid, "")
		p3.ClaimDeadlineAt = p3.At + 5000
		c3, err := s.ToolCallInsert(ctx, p3)
		if err != nil || c3.Status != store.ToolCallCreated || c3.Attempts != 0 || c3.DeadlineAt != 0 {
			t.Fatalf("claim without a policy: %+v, %v", c3, err)
		}
	})
}
