package metrics

// The metrics of DESIGN §14, named in one place so the packages that
// record the same metric (the run manager and the tool service both end
// runs) cannot drift apart. Each returns the registry's metric, created on
// first use. docs/API.md lists them with their labels.

// RunsStarted counts runs started, by agent.
func RunsStarted(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_runs_started_total", "Runs started, by agent.", "agent")
}

// Causes of a run's end (the cause label of RunsFinished).
const (
	CauseAgent    = "agent"     // the agent's stream ended it: done, or an agent_* / output error
	CauseToolCall = "tool_call" // a tool call's failure failed it (on_failure: fail_run)
	CauseCancel   = "cancel"    // a user or operator cancelled it
	CausePlatform = "platform"  // shutdown, a dead process, a store error
)

// RunsFinished counts runs that ended, by agent, final status (DONE,
// FAILED, CANCELLED), error code ("" when none) and cause.
func RunsFinished(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_runs_finished_total",
		"Runs ended, by agent, final status, error code and cause (agent, tool_call, cancel, platform).",
		"agent", "status", "code", "cause")
}

// RunDuration observes runs from start to their terminal state.
func RunDuration(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_run_duration_seconds", "Run duration from start to its terminal state, by agent and status.",
		DurationBuckets, "agent", "status")
}

// ToolCalls counts tool calls that reached a final state, by tool, state
// (SUCCEEDED, FAILED, REJECTED, …) and error code ("" on success).
func ToolCalls(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_tool_calls_total", "Tool calls ended, by tool, final state and error code.", "tool", "state", "code")
}

// ToolCallDuration observes tool calls from creation to their final state.
func ToolCallDuration(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_tool_call_duration_seconds", "Tool call duration from creation to its final state, by tool and state.",
		DurationBuckets, "tool", "state")
}

// ClientOffline counts client tool calls failed because no client of the
// session was connected.
func ClientOffline(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_client_offline_total", "Client tool calls failed client_offline (no client of the session connected), by tool.", "tool")
}

// ApprovalWait observes how long approvals waited for their outcome, by
// tool and outcome (approved, rejected, expired, cancelled).
func ApprovalWait(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_approval_wait_seconds", "Time an approval waited from its request to its outcome, by tool and outcome.",
		DurationBuckets, "tool", "outcome")
}

// LLMCalls counts LLM calls through the proxy, by agent, model and outcome.
func LLMCalls(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_llm_calls_total", "LLM calls through the proxy, by agent, model and outcome (ok, error, cancelled, timeout).", "agent", "model", "outcome")
}

// LLMTokens counts tokens by agent, model and kind (prompt, completion,
// cached, reasoning; cached is part of prompt, reasoning of completion).
func LLMTokens(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_llm_tokens_total", "LLM tokens, by agent, model and kind (prompt, completion, cached ⊂ prompt, reasoning ⊂ completion).", "agent", "model", "kind")
}

// LLMCost sums the estimated cost of LLM calls by agent and model, in the
// price table's currency.
func LLMCost(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_llm_cost_total", "Estimated cost of LLM calls (price table currency), by agent and model.", "agent", "model")
}

// LLMTTFT observes time to first token (first byte of the upstream body).
func LLMTTFT(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_llm_ttft_seconds", "Time from a call reaching the proxy to the first byte of the upstream's answer, by model.",
		LatencyBuckets, "model")
}

// LLMLatency observes whole LLM calls.
func LLMLatency(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_llm_latency_seconds", "Time from a call reaching the proxy to the last byte of the answer, by model.",
		DurationBuckets, "model")
}

// ProxyOverhead observes the latency the LLM proxy adds before a call goes
// upstream: authentication, admission, reading and checking the body,
// routing.
func ProxyOverhead(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_llm_proxy_overhead_seconds", "Latency the LLM proxy adds before the upstream request leaves (auth, limits, body, routing).",
		LatencyBuckets)
}

// EventCommit observes the event log's commits: from the oldest write of a
// batch being submitted to its transaction committing.
func EventCommit(r *Registry) *HistogramVec {
	return r.HistogramVec("agentplane_event_commit_seconds", "Event log commit latency: from a write's submission to the commit of its batch.",
		LatencyBuckets)
}

// Sources of a root run's transcript (the source label of TranscriptReads).
const (
	TranscriptFromMemory = "memory" // this process's copy and the messages added since
	TranscriptFromStore  = "store"  // read whole
)

// TranscriptReads counts root runs' transcript reads, by source.
func TranscriptReads(r *Registry) *CounterVec {
	return r.CounterVec("agentplane_transcript_reads_total", "Root runs' transcript reads, by source (memory: this process's copy and the messages added since; store: read whole).", "source")
}
