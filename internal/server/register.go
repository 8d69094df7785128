package server

import (
	"context"
	"time"

	"github.com/agentplane/agentplane/internal/demo"
	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// registerOverHTTP registers an agent through the public API with the Go
// SDK, rotating its key on every start (the demo agent keeps none).
func registerOverHTTP(ctx context.Context, base, adminKey, agentID, endpoint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := agentplane.Register(ctx, base, adminKey, agentplane.RegisterParams{
		AgentID: agentID, Name: "Demo agent", Endpoint: endpoint, Capabilities: []string{"chat", "demo"}, RotateKey: true,
		// Also an A2A agent: its card is /a2a/demo/.well-known/agent-card.json.
		A2A: true,
	})
	if err != nil {
		return "", err
	}
	return res.AgentAPIKey, nil
}

// registerTeam registers the demo team's agents through the public API
// (workers first, then the planner linked to them), rotating their keys, and
// returns the keys by agent id.
func registerTeam(ctx context.Context, base, adminKey string, team *demo.Team) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	keys := map[string]string{}
	for _, m := range team.Members {
		res, err := agentplane.Register(ctx, base, adminKey, agentplane.RegisterParams{
			AgentID: m.AgentID, Name: m.Name, Description: m.Description, Endpoint: m.URL, Capabilities: []string{"chat", "demo"},
			LinkedAgents: m.LinkedAgents, RotateKey: true,
		})
		if err != nil {
			return nil, err
		}
		keys[m.AgentID] = res.AgentAPIKey
	}
	return keys, nil
}

// registerCurrency registers the demo's remote A2A agent through the public
// API with protocol "a2a", by its card URL, as an operator would register
// any A2A agent: the platform fetches and checks its card.
func registerCurrency(ctx context.Context, base, adminKey string, c *demo.Currency) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := agentplane.Register(ctx, base, adminKey, agentplane.RegisterParams{
		AgentID: demo.CurrencyID, Name: "Currency converter", Description: demo.CurrencyDescription,
		Endpoint: c.URL + "/.well-known/agent-card.json", Capabilities: []string{"currency"}, Protocol: "a2a",
	})
	return err
}
