package toolsvc

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/tool"
)

// MaxIdempotencyKeyLen bounds an idempotency key.
const MaxIdempotencyKeyLen = 200

// InvokeParams is one POST /v1/tools/{tool_name}:invoke.
type InvokeParams struct {
	AgentID        string // the calling agent (its key)
	RunID          string
	ToolName       string
	Args           json.RawMessage
	IdempotencyKey string
	// TimeoutMS overrides the tool's timeout for this call (0: the tool's).
	TimeoutMS int64
	// NoWait answers as soon as the call is created, without the inline
	// wait for an allowed server or MCP tool: for a caller that waits
	// itself (the /mcp server, which sends progress meanwhile).
	NoWait bool
}

// errRunEnded rolls back an insert made for a run that has ended.
var errRunEnded = errors.New("run ended")

// invoke is Invoke, within the request's span (trace.go).
func (s *Service) invoke(ctx context.Context, p InvokeParams) (*CallView, error) {
	if p.RunID == "" {
		return nil, badRequest("invalid_request", "run_id is required")
	}
	if len(p.IdempotencyKey) > MaxIdempotencyKeyLen {
		return nil, badRequest("invalid_request", fmt.Sprintf("idempotency_key is longer than %d bytes", MaxIdempotencyKeyLen))
	}
	if p.TimeoutMS < 0 || p.TimeoutMS > tool.MaxTimeoutMS {
		return nil, badRequest("invalid_request", fmt.Sprintf("timeout_ms must be between 1 and %d", tool.MaxTimeoutMS))
	}
	t, err := s.lookup(ctx, p.ToolName)
	if err != nil {
		return s.replay(ctx, p, err)
	}
	// The run's facts (whose agent, session and user it is) never change:
	// read once. Whether it may still call a tool is decided in the
	// transaction, under the run's lock.
	run := s.runs.get(p.RunID)
	known := run != nil
	if !known {
		if run, err = s.st.RunGet(ctx, p.RunID); err == nil {
			s.runs.put(run)
		}
	}
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.AgentID != p.AgentID) {
		return nil, ErrRunForbidden
	}
	if err != nil {
		return nil, err
	}
	if !t.AllowsAgent(p.AgentID) {
		return s.replay(ctx, p, ErrToolForbidden)
	}
	target := ""
	if t.Def.Kind == tool.KindAgent {
		// The caller's links decide, not the tool's agents list; refused
		// here with the direct form's codes, before a call exists.
		target = strings.TrimPrefix(t.Def.Name, tool.AgentToolPrefix)
		if s.opts.Runs != nil {
			if err := s.opts.Runs.CheckLink(ctx, s.st, run, target); err != nil {
				return s.replay(ctx, p, err)
			}
		}
	}
	args := objectArgs(p.Args)
	if err := t.ValidateArgs(args); err != nil {
		var ae *tool.ArgsError
		if errors.As(err, &ae) {
			return s.replay(ctx, p, badRequest("invalid_args", ae.Error()))
		}
		return nil, err
	}
	argsMap, err := tool.DecodeArgs(args)
	if err != nil {
		return s.replay(ctx, p, badRequest("invalid_args", err.Error()))
	}
	canonical, hash := canonicalArgs(args)
	began := time.Now()
	decision, derr := t.Decide(tool.Input{Args: argsMap, AgentID: p.AgentID, UserID: run.UserID, ToolName: t.Def.Name})
	evalUS := time.Since(began).Microseconds()
	if derr != nil {
		s.opts.Logger.Warn("policy evaluation failed; blocking the call", "tool_name", t.Def.Name, "run_id", run.RunID, "err", derr)
	}
	timeout := t.Def.TimeoutMS
	if p.TimeoutMS > 0 {
		timeout = p.TimeoutMS
	}
	callID, approvalID := ids.New("tc"), ids.New("ap")
	pr := policyRecord{Decision: decision.Decision, Rule: decision.Rule, Expr: decision.Expr, Endpoint: t.Def.Endpoint, OnFailure: t.Def.OnFailure, Agent: target}
	// Redaction: what is stored and shown has "[redacted]" at the tool's
	// paths; the real args stay in this process's memory until the call is
	// sent (redact.go). They are held before the commit, which may start
	// the call at once. The idempotency hash is of the real args.
	stored := canonical
	if t.Redacts() {
		if stored, pr.ArgsRedacted = t.RedactArgs(canonical); pr.ArgsRedacted {
			pr.ArgsHeldBy, pr.ArgsHolder = s.opts.InstanceID, s.log.Origin()
			s.held.put(callID, run.SessionID, canonical)
		}
	}
	rec, _ := json.Marshal(pr)

	// The inline wait registers before the commit, so the call's end —
	// which may come right after it — wakes it, and the call as committed
	// need not be read back.
	w := s.waiters.add(callID, run.SessionID)
	defer s.waiters.remove(w)
	// An allowed server or MCP call is inserted dispatched and claimed by
	// this process, which holds its arguments (in the row, or held above):
	// the row dispatch would leave, in the insert (issue 13).
	claim := decision.Decision == tool.DecisionAllow && (t.Def.Kind == tool.KindServer || t.Def.Kind == tool.KindMCP)
	var existing, made *store.ToolCall
	_, err = s.commit(ctx, run.SessionID, run.RunID, func(st *step) error {
		existing, made = nil, nil
		ip := &store.ToolCallInsertParams{
			ToolCallID: callID, RunID: run.RunID, SessionID: run.SessionID, AgentID: p.AgentID,
			ToolName: t.Def.Name, Kind: t.Def.Kind, Args: stored, IdempotencyKey: p.IdempotencyKey,
			ArgsHash: hash, TimeoutMS: timeout, At: st.at,
			Policy: rec, // decided above: inserted POLICY_CHECKED
		}
		if claim {
			ip.ClaimDeadlineAt = st.at + timeout
		}
		c, err := st.q.ToolCallInsert(st.ctx, ip)
		if errors.Is(err, store.ErrDuplicate) {
			existing = c
			return nil
		}
		if err != nil {
			return err
		}
		if store.RunIsTerminal(st.run.Status) || st.run.Status == store.RunQueued { // a queued run's agent has not been invoked
			return errRunEnded
		}
		created := map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "kind": c.Kind, "args": c.Args, "timeout_ms": c.TimeoutMS}
		if p.IdempotencyKey != "" {
			created["idempotency_key"] = p.IdempotencyKey
		}
		st.event(eventlog.TypeToolCallCreated, created)
		pd := map[string]any{"tool_call_id": c.ToolCallID, "tool_name": c.ToolName, "decision": decision.Decision, "rule": decision.Rule, "eval_us": evalUS}
		if decision.Expr != "" {
			pd["expr"] = decision.Expr
		}
		if len(decision.Errors) > 0 {
			pd["errors"] = decision.Errors
		}
		st.event(eventlog.TypePolicyDecision, pd)

		switch decision.Decision {
		case tool.DecisionBlock:
			msg := "blocked by the tool's policy (" + decision.Rule + ")"
			made, err = st.finish(c, []string{store.ToolCallPolicyChecked}, store.ToolCallBlocked, nil, errorJSON("blocked", msg, nil), 0)
			return err
		case tool.DecisionRequireApproval:
			return st.requestApproval(c, t, approvalID)
		default:
			if c.Status == store.ToolCallRunning { // claimed by the insert
				made, err = st.claimed(c, recordOf(c))
				return err
			}
			made, err = st.dispatch(c)
			return err
		}
	})
	if err != nil || existing != nil {
		s.held.drop(callID) // no call of that id was created
	} else {
		s.held.commit(callID)
	}
	if errors.Is(err, errRunEnded) {
		return nil, s.runEnded(ctx, p.RunID)
	}
	if errors.Is(err, store.ErrNotFound) && known {
		// Known here, gone from the store (its session was purged):
		// answered as for any run the store does not hold.
		s.runs.drop(p.RunID)
		return nil, ErrRunForbidden
	}
	if err != nil {
		return nil, err
	}
	if existing != nil {
		if existing.ArgsHash != hash || existing.ToolName != t.Def.Name {
			return nil, idempotencyConflict(existing)
		}
		return s.settle(ctx, existing, p.NoWait)
	}
	if made != nil {
		// As committed (the waiter was registered before): no read back.
		if !p.NoWait && inlineWaited(made) {
			return s.waitOn(ctx, w, made, true, s.opts.InlineWait)
		}
		return View(made), nil
	}
	c, err := s.st.ToolCallGet(ctx, callID)
	if err != nil {
		return nil, err
	}
	return s.settle(ctx, c, p.NoWait)
}

// replay answers a retry whose call exists as the first try was answered,
// whatever the registry says now: the same idempotency_key returns the same
// tool_call_id (DESIGN §2.3), though the tool's schema, agents or links
// changed, or it was deleted, since the call was made — a retry (the SDKs
// retry on 502–504) must not report a refusal for a call that ran (found by
// an external audit). Without such a call the refusal stands. Checked only
// when refusing, so a call that passes pays nothing for it.
func (s *Service) replay(ctx context.Context, p InvokeParams, refused error) (*CallView, error) {
	if p.IdempotencyKey == "" {
		return nil, refused
	}
	c, err := s.st.ToolCallGetByKey(ctx, p.RunID, p.IdempotencyKey)
	if err != nil || c.AgentID != p.AgentID || (c.ToolName != p.ToolName && tool.FunctionName(c.ToolName) != p.ToolName) {
		return nil, refused
	}
	if _, hash := canonicalArgs(objectArgs(p.Args)); hash != c.ArgsHash {
		return nil, idempotencyConflict(c)
	}
	return s.settle(ctx, c, p.NoWait)
}

// idempotencyConflict refuses a key already used by c with other args.
func idempotencyConflict(c *store.ToolCall) error {
	e := *ErrIdempotencyConflict
	e.Details = map[string]any{"tool_call_id": c.ToolCallID}
	return &e
}

// objectArgs is the args an invoke sent, none or null read as {}.
func objectArgs(args json.RawMessage) json.RawMessage {
	if t := bytes.TrimSpace(args); len(t) == 0 || bytes.Equal(t, []byte("null")) {
		return json.RawMessage("{}")
	}
	return args
}

// inlineWaited: an invoke of c waits for it (bounded) — an allowed server,
// MCP or agent call still in flight.
func inlineWaited(c *store.ToolCall) bool {
	return (c.Kind == store.ToolKindServer || c.Kind == store.ToolKindMCP || c.Kind == store.ToolKindAgent) && (c.Status == store.ToolCallDispatched || c.Status == store.ToolCallRunning)
}

// settle answers an invoke: an allowed server, MCP or agent call still in
// flight is waited for (bounded) unless the caller waits itself (noWait),
// anything else is answered as it stands.
func (s *Service) settle(ctx context.Context, c *store.ToolCall, noWait bool) (*CallView, error) {
	if !noWait && inlineWaited(c) {
		return s.wait(ctx, c, s.opts.InlineWait)
	}
	return View(c), nil
}

// requestApproval opens an approval for c and parks it in WAITING_APPROVAL
// until a decision or the approval's expiry.
func (st *step) requestApproval(c *store.ToolCall, t *tool.Tool, approvalID string) error {
	expires := st.at + t.Def.ApprovalTimeoutMS
	a, err := st.q.ApprovalInsert(st.ctx, &store.ApprovalInsertParams{
		ApprovalID: approvalID, ToolCallID: c.ToolCallID, RunID: c.RunID, SessionID: c.SessionID,
		ToolName: c.ToolName, ArgsSummary: t.ArgsSummary(c.Args), ExpiresAt: expires, At: st.at,
	})
	if err != nil {
		return err
	}
	if c, err = st.move(c, store.ToolCallTransitionParams{From: []string{store.ToolCallPolicyChecked}, Status: store.ToolCallWaitingApproval, ApprovalID: &a.ApprovalID, DeadlineAt: &expires}); err != nil {
		return err
	}
	st.event(eventlog.TypeApprovalCreated, approvalRequired(a))
	return st.syncRun(c, nil)
}

// approvalRequired is the payload of approval_created, which the client
// receives as approval_required.
func approvalRequired(a *store.Approval) map[string]any {
	return map[string]any{"approval_id": a.ApprovalID, "tool_call_id": a.ToolCallID, "tool_name": a.ToolName, "args_summary": a.ArgsSummary, "expires_at": a.ExpiresAt}
}

// canonicalArgs returns args compacted, and a hash of them re-encoded with
// sorted keys (numbers kept as written), so the idempotency check does not
// depend on key order or spacing.
func canonicalArgs(args json.RawMessage) (json.RawMessage, string) {
	var compact bytes.Buffer
	if json.Compact(&compact, args) != nil {
		compact.Reset()
		compact.Write(args)
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	sorted := compact.Bytes()
	if dec.Decode(&v) == nil {
		if b, err := json.Marshal(v); err == nil {
			sorted = b
		}
	}
	sum := sha256.Sum256(sorted)
	return compact.Bytes(), hex.EncodeToString(sum[:])
}
