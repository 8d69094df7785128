package httpapi

import (
	"math"
	"net/http"

	"github.com/agentplane/agentplane/internal/respond"
	"github.com/agentplane/agentplane/internal/run"
	"github.com/agentplane/agentplane/internal/store"
)

// usageList serves GET /v1/usage?since=&until=&group_by=agent|model|user
// (admin): the LLM calls of the period (their llm_call_done events) summed
// by the database, with a total row.
func (a *API) usageList(w http.ResponseWriter, r *http.Request) {
	if !a.admin(w, r) {
		return
	}
	params := store.UsageParams{GroupBy: r.URL.Query().Get("group_by"), AgentSessionPrefix: run.AgentSessionPrefix}
	switch params.GroupBy {
	case "":
		params.GroupBy = store.UsageByAgent
	case store.UsageByAgent, store.UsageByModel, store.UsageByUser:
	default:
		respond.Err(w, r, respond.E(http.StatusBadRequest, "invalid_param", "group_by must be agent, model or user"))
		return
	}
	var err error
	if params.Since, err = timeParam(r, "since"); err == nil {
		params.Until, err = timeParam(r, "until")
	}
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	rows, err := a.St.UsageSummary(r.Context(), &params)
	if err != nil {
		respond.Err(w, r, err)
		return
	}
	total := store.UsageRow{}
	for i := range rows {
		u := &rows[i]
		total.LLMCalls += u.LLMCalls
		total.PromptTokens += u.PromptTokens
		total.CompletionTokens += u.CompletionTokens
		total.CachedTokens += u.CachedTokens
		total.ReasoningTokens += u.ReasoningTokens
		total.TotalTokens += u.TotalTokens
		total.EstimatedCost += u.EstimatedCost
		u.EstimatedCost = roundCost(u.EstimatedCost)
	}
	total.EstimatedCost = roundCost(total.EstimatedCost)
	respond.JSON(w, http.StatusOK, map[string]any{
		"group_by": params.GroupBy, "since": params.Since, "until": params.Until, "rows": rows, "total": total,
	})
}

// roundCost rounds to 1e-9 of the currency unit, so a sum of prices reads
// as the decimal it is (0.000034, not 0.00003399999999999999).
func roundCost(c float64) float64 { return math.Round(c*1e9) / 1e9 }
