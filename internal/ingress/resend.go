package ingress

import (
	"context"
	"encoding/json"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// pendingLogged names, per type of reminder Tools.Pending lists, the logged
// event it repeats and the payload field both carry as its id.
var pendingLogged = map[string]struct{ eventType, idField string }{
	"tool_request":      {eventlog.TypeToolRequest, "tool_call_id"},
	"approval_required": {eventlog.TypeApprovalCreated, "approval_id"},
}

// pendingKey is a reminder's type and id.
type pendingKey struct{ typ, id string }

// resendPendingPage bounds one read of a run's events of one type.
const resendPendingPage = 500

// resendPending sends again what the session still waits for from its
// client — tool requests and approvals — whose logged event the client
// says it has seen (seq <= afterSeq): it may have lost them with the
// connection. The reminders carry no seq and "resent": true; clients dedupe
// by tool_call_id / approval_id. Those logged after afterSeq are not
// repeated: the subscribe's replay sends them, and a client that resumes
// gets every event exactly once (DESIGN §2.1). A request that becomes
// pending after the list is read is logged after afterSeq too, so the
// replay has it.
func (c *conn) resendPending(ctx context.Context, sessionID string, afterSeq int64) {
	if c.s.opts.Tools == nil {
		return
	}
	pending, err := c.s.opts.Tools.Pending(ctx, sessionID)
	if err != nil {
		c.log.Warn("list pending tool requests", "session_id", sessionID, "err", err)
		return
	}
	if len(pending) == 0 {
		return
	}
	replayed, err := c.replayedPending(ctx, sessionID, afterSeq, pending)
	if err != nil {
		// Sent twice is better than never: a client tool or approval the
		// client never hears of holds its run until the deadline.
		c.log.Warn("read pending tool requests' events; resending them all", "session_id", sessionID, "err", err)
	}
	for _, m := range pending {
		if k, ok := keyOfPending(m); ok && replayed[k] {
			continue
		}
		b, err := json.Marshal(m)
		if err == nil && !c.write(b) {
			return
		}
	}
}

// replayedPending returns the reminders among pending whose logged event
// comes after afterSeq. It reads, for each run and type among them, that
// run's events of that type after afterSeq — few, through the index of a
// run's events — rather than the session's log.
func (c *conn) replayedPending(ctx context.Context, sessionID string, afterSeq int64, pending []map[string]any) (map[pendingKey]bool, error) {
	type runType struct{ runID, typ string }
	read := map[runType]bool{}
	replayed := map[pendingKey]bool{}
	for _, m := range pending {
		typ, _ := m["type"].(string)
		runID, _ := m["run_id"].(string)
		logged, ok := pendingLogged[typ]
		if !ok || runID == "" || read[runType{runID, typ}] {
			continue
		}
		read[runType{runID, typ}] = true
		for after := afterSeq; ; {
			evs, err := c.s.st.EventsList(ctx, &store.EventsListParams{SessionID: sessionID, RunID: runID, Type: logged.eventType, AfterSeq: after, Limit: resendPendingPage})
			if err != nil {
				return nil, err
			}
			for i := range evs {
				var p map[string]json.RawMessage
				var id string
				if json.Unmarshal(evs[i].Payload, &p) == nil && json.Unmarshal(p[logged.idField], &id) == nil {
					replayed[pendingKey{typ, id}] = true
				}
			}
			if len(evs) < resendPendingPage {
				break
			}
			after = evs[len(evs)-1].Seq
		}
	}
	return replayed, nil
}

// keyOfPending is the key of a reminder Tools.Pending listed.
func keyOfPending(m map[string]any) (pendingKey, bool) {
	typ, _ := m["type"].(string)
	logged, ok := pendingLogged[typ]
	if !ok {
		return pendingKey{}, false
	}
	id, ok := m[logged.idField].(string)
	return pendingKey{typ, id}, ok
}
