package mcpclient

import (
	"github.com/agentplane/agentplane/internal/store"
)

// ServerInfo is an MCP server as GET /v1/mcp_servers shows it: its spec
// (header and environment values redacted) and this process's view of its
// session. Every replica keeps its own session, so another replica may
// see it differently.
type ServerInfo struct {
	Spec
	// Status is StatusConnected, StatusConnecting or StatusFailed.
	Status string `json:"status"`
	// ToolCount is how many of its tools are offered; Tools names them.
	ToolCount int      `json:"tool_count"`
	Tools     []string `json:"tools"`
	// SkippedTools are tools it lists that cannot be offered, and why.
	SkippedTools []SkippedTool `json:"skipped_tools,omitempty"`
	// LastError is why the last attempt or session failed ("" once it works).
	LastError       string `json:"last_error,omitempty"`
	LastConnectedAt int64  `json:"last_connected_at,omitempty"`
	NextAttemptAt   int64  `json:"next_attempt_at,omitempty"`
	// ProtocolVersion and ServerName/ServerVersion are what the server
	// answered to initialize.
	ProtocolVersion string `json:"protocol_version,omitempty"`
	ServerName      string `json:"server_name,omitempty"`
	ServerVersion   string `json:"server_version,omitempty"`
	CreatedAt       int64  `json:"created_at"`
	UpdatedAt       int64  `json:"updated_at"`
}

// info shows row with this process's session of it.
func (m *Manager) info(row *store.MCPServerRow) *ServerInfo {
	info := &ServerInfo{Status: StatusConnecting, Tools: []string{}, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt}
	if spec, err := DecodeSpec(row.Spec); err == nil {
		info.Spec = spec.redacted()
	}
	info.Name = row.Name
	c := m.conn(row.Name)
	if c == nil || c.row.UpdatedAt != row.UpdatedAt {
		return info // not applied here yet
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	info.Status, info.LastError = c.status, c.lastError
	info.LastConnectedAt, info.NextAttemptAt = c.lastConnectedAt, c.nextAttemptAt
	info.ProtocolVersion = c.protocol
	if c.serverInfo != nil {
		info.ServerName, info.ServerVersion = c.serverInfo.Name, c.serverInfo.Version
	}
	for _, t := range c.tools {
		info.Tools = append(info.Tools, t.Name)
	}
	info.ToolCount = len(info.Tools)
	info.SkippedTools = c.skipped
	return info
}
