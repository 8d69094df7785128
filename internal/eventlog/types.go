package eventlog

// Event types (DESIGN §9). Payloads are JSON objects; for client-facing
// types they hold exactly the fields the client message carries.
const (
	TypeUserInput          = "user_input"           // {message}
	TypeRunStarted         = "run_started"          // {request_id, agent_id, message, traceparent}
	TypeRunDone            = "run_done"             // {usage, total_cost}
	TypeRunFailed          = "run_failed"           // {code, message}
	TypeRunCancelled       = "run_cancelled"        // {state:"CANCELLED", detail:{reason, by}, source:"platform"}
	TypeAgentInvokeStarted = "agent_invoke_started" // {agent_id, endpoint}
	TypeAgentStreamDelta   = "agent_stream_delta"   // {text}
	TypeAgentInvokeDone    = "agent_invoke_done"    // {ok, error?, duration_ms, deltas}
	TypeState              = "state"                // {state, detail, source, request_id?} (the first QUEUED names its invoke)
	TypeLLMCallStarted     = "llm_call_started"
	TypeLLMCallDone        = "llm_call_done"
)

// Tool call and approval events (issue 4). approval_created reaches the
// client as approval_required and tool_request as itself; the others are
// trace only.
const (
	TypeToolCallCreated  = "tool_call_created" // {tool_call_id, tool_name, kind, args, idempotency_key, timeout_ms}
	TypePolicyDecision   = "policy_decision"   // {tool_call_id, tool_name, decision, rule, expr, errors, eval_us}
	TypeApprovalCreated  = "approval_created"  // {approval_id, tool_call_id, tool_name, args_summary, expires_at}
	TypeApprovalDecision = "approval_decision" // {approval_id, tool_call_id, decision, decided_by, reason, decided_at, waited_ms}
	TypeToolDispatched   = "tool_dispatched"   // {tool_call_id, tool_name, kind, attempt, deadline_at}
	TypeToolRequest      = "tool_request"      // {tool_call_id, tool_name, args, deadline_ts}
	TypeToolResult       = "tool_result"       // {tool_call_id, tool_name, state, status, result?, error?, duration_ms, exec_ms}
	TypeToolProgress     = "tool_progress"     // {tool_call_id, tool_name, progress, total?, message?} (an MCP server's progress)
)

// Multi-agent events (issue 9, DESIGN §11). agent_called_child is logged
// on the calling run and is trace only; the sub_agent_* events are logged
// on the child run (with its parent_run_id) and reach the session's
// clients in place of the child's raw run_started, deltas and end.
const (
	TypeAgentCalledChild  = "agent_called_child"   // {child_run_id, agent_id, depth, tool_call_id?, idempotency_key?}
	TypeSubAgentCallStart = "sub_agent_call_start" // {agent_id, input_summary, depth, tool_call_id?}
	TypeSubAgentPartial   = "sub_agent_partial"    // {text}
	TypeSubAgentComplete  = "sub_agent_complete"   // {agent_id, output, usage, duration_ms}
	TypeSubAgentError     = "sub_agent_error"      // {agent_id, code, message, duration_ms}
)

// Input required (issue 10, DESIGN §12). input_required is the terminal
// event of a run whose agent ended its turn asking the user; clients get it
// as input_required (a child's as sub_agent_complete with status
// "input_required"). a2a_remote_task is trace only: the task and context
// ids a remote A2A agent gave the run, so a run resuming it continues the
// same remote task.
const (
	TypeInputRequired = "input_required"  // {question, detail?}
	TypeA2ARemoteTask = "a2a_remote_task" // {agent_id, task_id, context_id}
)

// The run queue (issue 14, DESIGN §15): a root run started over the global
// cap is queued (trace only; its client gets state QUEUED {position}) and
// run_started comes when it is admitted.
const (
	TypeRunQueued = "run_queued" // {request_id, agent_id, message, traceparent, position}
)

// IsRunEnd reports whether typ is a run's terminal event.
func IsRunEnd(typ string) bool {
	return typ == TypeRunDone || typ == TypeRunFailed || typ == TypeRunCancelled || typ == TypeInputRequired
}

// Sources of a state event (and of run_cancelled, which clients receive as
// a state). The platform's run states and an agent's own states share the
// "state" message, and an agent may name its states anything — "CANCELLED"
// too — so every one says whose it is, and clients take the run's status
// from source "platform" only (issue 8).
const (
	StateSourcePlatform = "platform"
	StateSourceAgent    = "agent"
)
