package run

import (
	"context"
	"encoding/json"
	"errors"
	"math"

	"github.com/agentplane/agentplane/internal/eventlog"
	"github.com/agentplane/agentplane/internal/store"
)

// Usage is what a run, or a run tree, consumed (DESIGN §11 total_usage):
// LLM tokens and estimated cost from its llm_call_done events, its LLM
// calls and its tool calls.
type Usage struct {
	PromptTokens     int64   `json:"prompt_tokens"`
	CompletionTokens int64   `json:"completion_tokens"`
	TotalTokens      int64   `json:"total_tokens"`
	CachedTokens     int64   `json:"cached_tokens"`
	ReasoningTokens  int64   `json:"reasoning_tokens"`
	EstimatedCost    float64 `json:"estimated_cost"`
	LLMCalls         int     `json:"llm_calls"`
	ToolCalls        int     `json:"tool_calls"`
}

func (u *Usage) add(o Usage) {
	u.PromptTokens += o.PromptTokens
	u.CompletionTokens += o.CompletionTokens
	u.TotalTokens += o.TotalTokens
	u.CachedTokens += o.CachedTokens
	u.ReasoningTokens += o.ReasoningTokens
	u.EstimatedCost = roundCost(u.EstimatedCost + o.EstimatedCost)
	u.LLMCalls += o.LLMCalls
	u.ToolCalls += o.ToolCalls
}

// roundCost keeps sums of prices free of float noise (1e-9 of the price
// table's currency is far below any price).
func roundCost(c float64) float64 { return math.Round(c*1e9) / 1e9 }

// ownUsage sums one run's own LLM and tool calls from its events.
func ownUsage(ctx context.Context, q store.Queries, r *store.Run) (Usage, error) {
	var u Usage
	llm, err := q.EventsList(ctx, &store.EventsListParams{SessionID: r.SessionID, RunID: r.RunID, Type: eventlog.TypeLLMCallDone, Limit: 10000})
	if err != nil {
		return u, err
	}
	for _, e := range llm {
		var p Usage
		if json.Unmarshal(e.Payload, &p) == nil {
			p.LLMCalls, p.ToolCalls = 1, 0
			u.add(p)
		}
	}
	tools, err := q.EventsList(ctx, &store.EventsListParams{SessionID: r.SessionID, RunID: r.RunID, Type: eventlog.TypeToolCallCreated, Limit: 10000})
	if err != nil {
		return u, err
	}
	u.ToolCalls = len(tools)
	return u, nil
}

// Node is a run in its tree (GET /v1/runs/{run_id}/tree): its own usage
// (what its agent reported), the total over its subtree, and its children,
// oldest first.
type Node struct {
	RunID       string          `json:"run_id"`
	AgentID     string          `json:"agent_id"`
	ParentRunID string          `json:"parent_run_id"`
	Depth       int             `json:"depth"`
	Status      string          `json:"status"`
	Usage       json.RawMessage `json:"usage"`
	TotalUsage  Usage           `json:"total_usage"`
	StartedAt   int64           `json:"started_at"`
	EndedAt     int64           `json:"ended_at,omitempty"`
	Error       json.RawMessage `json:"error,omitempty"`
	ToolCallID  string          `json:"tool_call_id,omitempty"`
	// IntentionID, ResumesRunID, Question and QuestionDetail: see
	// store.Run (DESIGN §12).
	IntentionID    string          `json:"intention_id,omitempty"`
	ResumesRunID   string          `json:"resumes_run_id,omitempty"`
	Question       string          `json:"question,omitempty"`
	QuestionDetail json.RawMessage `json:"question_detail,omitempty"`
	Children       []*Node         `json:"children"`
}

// Tree returns the run and everything below it, each node with the
// total usage of its subtree.
func (m *Manager) Tree(ctx context.Context, r *store.Run) (*Node, error) {
	return tree(ctx, m.st, r)
}

func tree(ctx context.Context, q store.Queries, r *store.Run) (*Node, error) {
	all, err := q.RunListTree(ctx, r.RootRunID)
	if err != nil {
		return nil, err
	}
	runs := append([]*store.Run{r}, descendants(all, r.RunID)...)
	nodes := make(map[string]*Node, len(runs))
	for _, x := range runs {
		own, err := ownUsage(ctx, q, x)
		if err != nil {
			return nil, err
		}
		usage := x.Usage
		if len(usage) == 0 {
			usage = json.RawMessage("{}")
		}
		nodes[x.RunID] = &Node{RunID: x.RunID, AgentID: x.AgentID, ParentRunID: x.ParentRunID, Depth: x.Depth, Status: x.Status,
			Usage: usage, TotalUsage: own, StartedAt: x.StartedAt, EndedAt: x.EndedAt, Error: x.Error, ToolCallID: x.ToolCallID,
			IntentionID: x.IntentionID, ResumesRunID: x.ResumesRunID, Question: x.Question, QuestionDetail: x.QuestionDetail, Children: []*Node{}}
	}
	// descendants lists shallowest first: link every child, then sum the
	// totals up from the deepest.
	for _, x := range runs[1:] {
		p := nodes[x.ParentRunID]
		p.Children = append(p.Children, nodes[x.RunID])
	}
	for i := len(runs) - 1; i > 0; i-- {
		x := runs[i]
		nodes[x.ParentRunID].TotalUsage.add(nodes[x.RunID].TotalUsage)
	}
	return nodes[r.RunID], nil
}

// View is a run as GET /v1/runs/{run_id} shows it: the row, the ids of its
// children and the total usage of its tree below and including it.
type View struct {
	*store.Run
	Children   []string `json:"children"`
	TotalUsage Usage    `json:"total_usage"`
}

// View builds r's view.
func (m *Manager) View(ctx context.Context, r *store.Run) (*View, error) {
	t, err := m.Tree(ctx, r)
	if err != nil {
		return nil, err
	}
	v := &View{Run: r, Children: []string{}, TotalUsage: t.TotalUsage}
	for _, c := range t.Children {
		v.Children = append(v.Children, c.RunID)
	}
	return v, nil
}

// ChildResult is a child run as its caller gets it once it ended (the
// direct form's JSON answer, DESIGN §11).
type ChildResult struct {
	RunID      string          `json:"run_id"`
	Status     string          `json:"status"`
	Output     string          `json:"output"`
	Usage      json.RawMessage `json:"usage"`
	TotalUsage Usage           `json:"total_usage"`
	Error      json.RawMessage `json:"error,omitempty"`
	// Question and Detail are what the child asked when it ended
	// INPUT_REQUIRED (DESIGN §12): the caller decides whether to ask the
	// user, and a later call of the same intention answers it.
	Question string          `json:"question,omitempty"`
	Detail   json.RawMessage `json:"detail,omitempty"`
}

// Result builds the answer for a run that has ended: its output (the
// sub_agent_complete of a child, else its transcript answer), usage and
// total usage.
func (m *Manager) Result(ctx context.Context, r *store.Run) (*ChildResult, error) {
	t, err := m.Tree(ctx, r)
	if err != nil {
		return nil, err
	}
	res := &ChildResult{RunID: r.RunID, Status: r.Status, Usage: t.Usage, TotalUsage: t.TotalUsage, Error: r.Error}
	if r.Status == store.RunInputRequired {
		res.Question, res.Detail = r.Question, r.QuestionDetail
	}
	if r.Status == store.RunDone {
		evs, err := m.st.EventsList(ctx, &store.EventsListParams{SessionID: r.SessionID, RunID: r.RunID, Type: eventlog.TypeSubAgentComplete, Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(evs) > 0 {
			var p struct {
				Output string `json:"output"`
			}
			_ = json.Unmarshal(evs[0].Payload, &p)
			res.Output = p.Output
		}
	}
	return res, nil
}

// WaitEnded returns r once it has ended, woken by its terminal event in the
// log (from any process), never by polling; or ctx's error.
func (m *Manager) WaitEnded(ctx context.Context, r *store.Run) (*store.Run, error) {
	if store.RunIsTerminal(r.Status) {
		return r, nil
	}
	sess, err := m.st.SessionGet(ctx, r.SessionID)
	if err != nil {
		return nil, err
	}
	// Follow from the session's current end, then read the run: an end
	// committed before the read is in the row, one after it comes through
	// the subscription.
	sub := m.log.Subscribe(r.SessionID, sess.LastSeq)
	defer sub.Close()
	for {
		cur, err := m.st.RunGet(ctx, r.RunID)
		if err != nil {
			return nil, err
		}
		if store.RunIsTerminal(cur.Status) {
			return cur, nil
		}
		for ended := false; !ended; {
			evs, err := sub.Next(ctx)
			if err != nil {
				if errors.Is(err, eventlog.ErrSubscriptionClosed) {
					return nil, ErrShuttingDown
				}
				return nil, err
			}
			for i := range evs {
				if evs[i].RunID == r.RunID && eventlog.IsRunEnd(evs[i].Type) {
					ended = true
				}
			}
		}
	}
}
