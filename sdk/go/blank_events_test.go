package agentplane_test

import (
	"context"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// TestBlankStateAndQuestionAreRefused: the platform fails the run
// (agent_protocol_error) on a state event without a state and on an
// input_required whose question is empty or white space (API.md "Agent
// protocol"). The SDK refuses them without sending, so a handler that goes
// on — or returns such a question — keeps its run: done, or an error that
// says what was wrong.
func TestBlankStateAndQuestionAreRefused(t *testing.T) {
	p := startPlatform(t, testdb.DSN(t, "sqlite"))
	var stateErr, questionErr error
	p.agent(t, "blank", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		stateErr = s.State("", map[string]any{"step": 1})
		questionErr = s.InputRequired(" \n\t", nil)
		return s.Delta("still here")
	})
	msgs := p.run(t, "blank", "go")
	if end := msgs[len(msgs)-1]; end["type"] != "done" {
		t.Fatalf("the run ended %v, want done", end)
	}
	if stateErr == nil {
		t.Error(`State("") = nil, want an error`)
	}
	if questionErr == nil {
		t.Error("InputRequired(blank) = nil, want an error")
	}

	p.agent(t, "blank-return", nil, func(ctx context.Context, req *agentplane.Request, s agentplane.Stream) error {
		return &agentplane.InputRequiredError{Question: "  "}
	})
	msgs = p.run(t, "blank-return", "go")
	if end := msgs[len(msgs)-1]; end["type"] != "error" || end["code"] != agentplane.CodeAgentException {
		t.Fatalf("the run ended %v, want error %s", end, agentplane.CodeAgentException)
	}
}
