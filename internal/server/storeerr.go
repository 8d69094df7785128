package server

import (
	"net/http"

	"github.com/agentplane/agentplane/internal/llmproxy"
	"github.com/agentplane/agentplane/internal/respond"
)

// proxyStoreErrors makes the LLM proxy, which renders its own errors,
// answer a store outage during authentication as every other surface does:
// 503 store_unavailable with Retry-After, not 500 (issue 8, item 11); and
// a key over its rate limit 429 rate_limited with Retry-After.
func proxyStoreErrors(authenticate llmproxy.Authenticator) llmproxy.Authenticator {
	return func(r *http.Request) (llmproxy.Caller, error) {
		c, err := authenticate(r)
		if err != nil {
			if e := respond.As(err); e != nil && e.Code == "store_unavailable" {
				return c, &llmproxy.Error{Status: e.Status, Code: e.Code, Message: e.Message, RetryAfterMS: respond.StoreRetryAfter * 1000}
			}
			if e := respond.As(err); e != nil && e.Code == llmproxy.CodeRateLimited {
				// The key's rate limit (limits: in the config file).
				ms, _ := e.Details["retry_after_ms"].(int64)
				return c, &llmproxy.Error{Status: e.Status, Code: e.Code, Message: e.Message, RetryAfterMS: ms}
			}
		}
		return c, err
	}
}
