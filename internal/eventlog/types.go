package eventlog

// Event types (DESIGN §9). Payloads are JSON objects; for client-facing
// types they hold exactly the fields the client message carries.
const (
	TypeUserInput          = "user_input"           // {message}
	TypeRunStarted         = "run_started"          // {request_id, agent_id, message, traceparent}
	TypeRunDone            = "run_done"             // {usage, total_cost}
	TypeRunFailed          = "run_failed"           // {code, message}
	TypeRunCancelled       = "run_cancelled"        // {state:"CANCELLED", detail:{reason, by}}
	TypeAgentInvokeStarted = "agent_invoke_started" // {agent_id, endpoint}
	TypeAgentStreamDelta   = "agent_stream_delta"   // {text}
	TypeAgentInvokeDone    = "agent_invoke_done"    // {ok, error?, duration_ms, deltas}
	TypeState              = "state"                // {state, detail}
	TypeLLMCallStarted     = "llm_call_started"
	TypeLLMCallDone        = "llm_call_done"
)
