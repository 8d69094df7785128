package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/agent"
	"github.com/agentplane/agentplane/internal/auth"
	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
)

// sseKeepAlive is how often a quiet child stream gets a comment, so
// proxies and the caller's idle timers do not cut it while the child
// waits (for an approval, a client tool, its own children).
const sseKeepAlive = 15 * time.Second

// childInvokeRequest is the body of POST /v1/agents/{agent_id}:invoke.
type childInvokeRequest struct {
	Message *struct {
		Role    string  `json:"role"`
		Content *string `json:"content"`
	} `json:"message"`
	IdempotencyKey string `json:"idempotency_key"`
}

// agentInvoke serves the direct form of an agent calling another (DESIGN
// §11): a child run of the caller's run (x-run-id), streamed as SSE with
// Accept: text/event-stream, else answered as JSON once it ended. The
// child belongs to the platform, not to this request: if the caller goes
// away it keeps running, and the same idempotency_key attaches again.
func (a *API) agentInvoke(w http.ResponseWriter, r *http.Request, agentID string) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	if p.Kind != auth.Agent {
		respond.Err(w, r, respond.E(http.StatusForbidden, "forbidden", "agents call agents with their own agent key"))
		return
	}
	parent := r.Header.Get("x-run-id")
	if parent == "" {
		respond.Err(w, r, respond.E(http.StatusBadRequest, "missing_run_id", "send the x-run-id header of the calling run"))
		return
	}
	req, err := decodeChildInvoke(w, r)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	started, err := a.Runs.StartChild(r.Context(), run.ChildParams{
		CallerAgentID: p.AgentID, ParentRunID: parent, AgentID: agentID,
		Message:        agent.Message{Role: "user", Content: *req.Message.Content},
		IdempotencyKey: req.IdempotencyKey,
	})
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	if wantsSSE(r) {
		a.streamChild(w, r, started)
		return
	}
	ended, err := a.Runs.WaitEnded(r.Context(), started.Run)
	if err != nil {
		if r.Context().Err() != nil {
			return // the caller left; the child goes on
		}
		respond.Err(w, r, err)
		return
	}
	res, err := a.Runs.Result(r.Context(), ended)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	respond.JSON(w, http.StatusOK, res)
}

func decodeChildInvoke(w http.ResponseWriter, r *http.Request) (*childInvokeRequest, error) {
	raw, err := respond.ReadBody(w, r, maxBody)
	if err != nil {
		return nil, err
	}
	var req childInvokeRequest
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return nil, respond.E(http.StatusBadRequest, "invalid_json", "request body: "+err.Error())
	}
	if dec.More() {
		return nil, respond.E(http.StatusBadRequest, "invalid_json", "trailing data after the JSON body")
	}
	if req.Message == nil || req.Message.Content == nil || (req.Message.Role != "" && req.Message.Role != "user") {
		return nil, respond.E(http.StatusBadRequest, "invalid_message", `message must be {"role":"user","content":"…"}`)
	}
	return &req, nil
}

func wantsSSE(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, "text/event-stream") {
			return true
		}
	}
	return false
}

// childSSETypes maps a child's logged events to the SSE events its caller
// gets; the child's own events only, from the log.
var childSSETypes = map[string]string{
	eventlog.TypeRunStarted:       "run_started",
	eventlog.TypeAgentStreamDelta: "delta",
	eventlog.TypeState:            "state",
	eventlog.TypeToolRequest:      "tool_request",
	eventlog.TypeApprovalCreated:  "approval_required",
	eventlog.TypeRunDone:          "done",
	eventlog.TypeRunFailed:        "error",
	eventlog.TypeRunCancelled:     "error",
	eventlog.TypeInputRequired:    "input_required",
}

// streamChild writes the child's events as SSE from its first one (a
// caller attaching again with the same key gets them all again), each
// flushed as it commits, until its terminal event.
func (a *API) streamChild(w http.ResponseWriter, r *http.Request, started *run.ChildStarted) {
	child := started.Run
	sub := a.Log.Subscribe(child.SessionID, max(started.FirstSeq-1, 0))
	defer sub.Close()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.Header().Set("x-child-run-id", child.RunID)
	w.WriteHeader(http.StatusOK)
	if rc.Flush() != nil {
		return
	}
	lastWrite := time.Now()
	write := func(b []byte) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, err := w.Write(b); err != nil {
			return false
		}
		lastWrite = time.Now()
		return rc.Flush() == nil
	}
	keepAlive := []byte(": keep-alive\n\n")
	output := ""
	for {
		// The subscription follows the child's whole session: other runs'
		// events there (the child's own children, a sibling) wake this loop
		// and are not written. So the keep-alive is due sseKeepAlive after
		// the last byte written, not after the last wake-up, or a busy
		// session would leave the caller's stream silent until its idle
		// timer cut it.
		wait := sseKeepAlive - time.Since(lastWrite)
		if wait <= 0 {
			if !write(keepAlive) {
				return
			}
			continue
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		evs, err := sub.Next(ctx)
		cancel()
		if err != nil {
			if r.Context().Err() != nil {
				return // the caller left; the child goes on
			}
			if errors.Is(err, context.DeadlineExceeded) {
				if !write(keepAlive) {
					return
				}
				continue
			}
			write(sseEvent("error", map[string]any{"type": "error", "run_id": child.RunID, "code": "stream_failed",
				"message": "the child's event stream broke off; invoke again with the same idempotency_key to attach again"}))
			return
		}
		for i := range evs {
			e := &evs[i]
			if e.RunID != child.RunID {
				continue
			}
			if e.Type == eventlog.TypeSubAgentComplete {
				var p struct {
					Output string `json:"output"`
				}
				_ = json.Unmarshal(e.Payload, &p)
				output = p.Output
				continue
			}
			typ, ok := childSSETypes[e.Type]
			if !ok {
				continue
			}
			m := map[string]any{}
			var res *run.ChildResult
			if eventlog.IsRunEnd(e.Type) {
				// The end carries what the JSON form answers (status,
				// total_usage), so a streaming caller needs no second request.
				if cur, err := a.St.RunGet(r.Context(), child.RunID); err == nil {
					res, _ = a.Runs.Result(r.Context(), cur)
				}
			}
			if e.Type == eventlog.TypeRunCancelled {
				// The caller learns a cancel as an error carrying its code.
				if res != nil {
					_ = json.Unmarshal(res.Error, &m)
				}
			} else {
				_ = json.Unmarshal(e.Payload, &m)
			}
			if e.Type == eventlog.TypeRunDone {
				m["output"] = output
			}
			if res != nil {
				m["status"], m["total_usage"] = res.Status, res.TotalUsage
			}
			m["type"], m["session_id"], m["seq"], m["event_id"], m["ts"], m["run_id"] = typ, e.SessionID, e.Seq, e.EventID, e.TS, e.RunID
			if e.ParentRunID != "" {
				m["parent_run_id"] = e.ParentRunID
			}
			if !write(sseEvent(typ, m)) {
				return
			}
			if eventlog.IsRunEnd(e.Type) {
				return
			}
		}
	}
}

// sseEvent is one SSE event with JSON data.
func sseEvent(name string, data any) []byte {
	b, _ := json.Marshal(data)
	return []byte("event: " + name + "\ndata: " + string(b) + "\n\n")
}
