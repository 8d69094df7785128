package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
)

// The shared process plumbing, under the names the benchmarks use.
type proc = benchproc.Proc

const (
	adminKey = benchproc.AdminKey
	userID   = benchproc.UserID
	userKey  = benchproc.UserKey
	agentID  = "bench-agent"
)

var (
	postgresURL    = benchproc.PostgresURL
	buildPlatform  = benchproc.BuildPlatform
	startPlatform  = benchproc.StartPlatform
	selfProc       = benchproc.SelfProc
	postgresSchema = benchproc.PostgresSchema
	procStatusKB   = benchproc.ProcStatusKB
	procCPU        = benchproc.ProcCPU
	raiseNoFile    = benchproc.RaiseNoFile
	machineBusy    = benchproc.MachineBusy
	loadAvg        = benchproc.LoadAvg
	scrapeMetrics  = benchproc.ScrapeMetrics
)

// registerAgent registers an agent through the public API.
func registerAgent(base, id, endpoint string) error {
	body, _ := json.Marshal(map[string]any{"agent_id": id, "name": "bench agent", "endpoint": endpoint, "capabilities": []string{"chat"}})
	req, _ := http.NewRequest("POST", base+"/v1/agents/register", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+adminKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("register %s: %d %s", id, resp.StatusCode, raw)
	}
	return nil
}
