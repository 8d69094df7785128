package server

import (
	"context"
	"time"

	agentplane "github.com/agentplane/agentplane/sdk/go"
)

// registerOverHTTP registers an agent through the public API with the Go
// SDK, rotating its key on every start (the demo agent keeps none).
func registerOverHTTP(ctx context.Context, base, adminKey, agentID, endpoint string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := agentplane.Register(ctx, base, adminKey, agentplane.RegisterParams{
		AgentID: agentID, Name: "Demo agent", Endpoint: endpoint, Capabilities: []string{"chat", "demo"}, RotateKey: true,
	})
	if err != nil {
		return "", err
	}
	return res.AgentAPIKey, nil
}
