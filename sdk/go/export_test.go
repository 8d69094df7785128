package agentplane

import "time"

// Jitter exposes jitter to the tests.
var Jitter = jitter

// WithToolTiming shortens InvokeTool's pauses so the tests run fast: the
// pause between :wait rounds is drawn from [pauseMin, pauseMax] and the
// retry backoff starts at retryBase.
func WithToolTiming(pauseMin, pauseMax, retryBase time.Duration) ToolOption {
	return func(o *toolOptions) { o.pauseMin, o.pauseMax, o.retryBase = pauseMin, pauseMax, retryBase }
}

// WithToolAttemptTime shortens the time one tool request is given to
// answer: invokeWait stands for the platform's inline wait of an invoke,
// wait for ToolWaitTimeout, grace for ToolAttemptGrace.
func WithToolAttemptTime(invokeWait, wait, grace time.Duration) ToolOption {
	return func(o *toolOptions) { o.invokeWait, o.waitTimeout, o.grace = invokeWait, wait, grace }
}

// WithAgentTiming shortens an agent call's read timeout (AgentReadTimeout)
// and the backoff between its attaches.
func WithAgentTiming(readTimeout, retryBase time.Duration) AgentOption {
	return func(o *agentOptions) { o.readTimeout, o.retryBase = readTimeout, retryBase }
}
