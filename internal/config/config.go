// Package config turns environment variables, flags and the optional YAML
// file into one Config value (DESIGN §3). There are no globals: main builds
// a Config and passes it down.
package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is everything `agentplane serve` needs.
type Config struct {
	Addr              string
	DB                string // "sqlite:PATH" or "postgres://…"
	AdminKey          string
	AdminKeyGenerated bool
	APIKeys           map[string]string // user id -> key
	LLMBaseURL        string
	LLMAPIKey         string
	EndpointAllowlist string
	ConfigFile        string
	Role              string // all | orchestrator | ingress
	Demo              bool
	InstanceID        string

	// Timeouts and intervals (flags only; defaults suit production).
	ShutdownGrace         time.Duration
	AgentFirstByteTimeout time.Duration
	AgentIdleTimeout      time.Duration
	HealthInterval        time.Duration
	MaxFrameBytes         int

	File File // the YAML file, if any
}

// File is the optional YAML configuration (AGENTPLANE_CONFIG). Sections owned
// by other packages stay raw here and are decoded by their owners.
type File struct {
	Agents []AgentSpec `yaml:"agents"`
	LLM    yaml.Node   `yaml:"llm"`
	Tools  yaml.Node   `yaml:"tools"`
	// MCPServers are MCP servers used as tool sources (DESIGN §13), with
	// the fields of PUT /v1/mcp_servers/{name} plus name.
	MCPServers yaml.Node `yaml:"mcp_servers"`
}

// AgentSpec declares an agent to register at start. Its key is printed
// once, like a registration over HTTP.
type AgentSpec struct {
	AgentID      string   `yaml:"agent_id"`
	Name         string   `yaml:"name"`
	Endpoint     string   `yaml:"endpoint"`
	Capabilities []string `yaml:"capabilities"`
	LinkedAgents []string `yaml:"linked_agents"`
}

// Roles accepted by --role.
var Roles = []string{"all", "orchestrator", "ingress"}

// Load reads env (through getenv) and then args (flags override env).
func Load(args []string, getenv func(string) string, stderr io.Writer) (*Config, error) {
	c := &Config{}
	env := func(name, def string) string {
		if v := getenv(name); v != "" {
			return v
		}
		return def
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var apiKeys string
	fs.StringVar(&c.Addr, "addr", env("AGENTPLANE_ADDR", "127.0.0.1:8080"), "listen address (AGENTPLANE_ADDR)")
	fs.StringVar(&c.DB, "db", env("AGENTPLANE_DB", "sqlite:./agentplane.db"), "sqlite:PATH or postgres:// URL (AGENTPLANE_DB)")
	fs.StringVar(&c.AdminKey, "admin-key", env("AGENTPLANE_ADMIN_KEY", ""), "admin key; generated and printed if empty (AGENTPLANE_ADMIN_KEY)")
	fs.StringVar(&apiKeys, "api-keys", env("AGENTPLANE_API_KEYS", ""), "client keys user1:key1,user2:key2 (AGENTPLANE_API_KEYS)")
	fs.StringVar(&c.LLMBaseURL, "llm-base-url", env("AGENTPLANE_LLM_BASE_URL", ""), "upstream OpenAI-compatible base URL (AGENTPLANE_LLM_BASE_URL)")
	fs.StringVar(&c.LLMAPIKey, "llm-api-key", env("AGENTPLANE_LLM_API_KEY", ""), "key sent upstream (AGENTPLANE_LLM_API_KEY)")
	fs.StringVar(&c.EndpointAllowlist, "endpoint-allowlist", env("AGENTPLANE_ENDPOINT_ALLOWLIST", ""), "hosts/CIDRs agents may live on (AGENTPLANE_ENDPOINT_ALLOWLIST)")
	fs.StringVar(&c.ConfigFile, "config", env("AGENTPLANE_CONFIG", ""), "YAML file with agents, tools, prices (AGENTPLANE_CONFIG)")
	fs.StringVar(&c.Role, "role", env("AGENTPLANE_ROLE", "all"), "all | orchestrator | ingress")
	fs.BoolVar(&c.Demo, "demo", env("AGENTPLANE_DEMO", "") == "true", "start a demo agent and user key")
	fs.StringVar(&c.InstanceID, "instance-id", env("AGENTPLANE_INSTANCE_ID", ""), "stable id of this process (default host+addr); runs a previous process with this id left unfinished are failed at start")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight runs may finish on SIGTERM before they are failed")
	fs.DurationVar(&c.AgentFirstByteTimeout, "agent-first-byte-timeout", 30*time.Second, "time for an agent's first SSE event")
	fs.DurationVar(&c.AgentIdleTimeout, "agent-idle-timeout", 60*time.Second, "longest gap between an agent's SSE events")
	fs.DurationVar(&c.HealthInterval, "health-interval", 15*time.Second, "how often agents' /health is probed")
	fs.IntVar(&c.MaxFrameBytes, "max-frame-bytes", 1<<20, "largest WebSocket message accepted from a client")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	keys, err := ParseAPIKeys(apiKeys)
	if err != nil {
		return nil, err
	}
	c.APIKeys = keys
	if err := c.validate(); err != nil {
		return nil, err
	}
	if c.ConfigFile != "" {
		if err := c.loadFile(); err != nil {
			return nil, err
		}
	}
	if c.InstanceID == "" {
		host, _ := os.Hostname()
		c.InstanceID = host + "/" + c.Addr
	}
	return c, nil
}

func (c *Config) validate() error {
	var errs []error
	if !strings.HasPrefix(c.DB, "sqlite:") && !strings.HasPrefix(c.DB, "postgres://") && !strings.HasPrefix(c.DB, "postgresql://") {
		errs = append(errs, fmt.Errorf("AGENTPLANE_DB must be sqlite:PATH or a postgres:// URL, got %q", c.DB))
	}
	valid := false
	for _, r := range Roles {
		valid = valid || r == c.Role
	}
	if !valid {
		errs = append(errs, fmt.Errorf("--role must be one of %s, got %q", strings.Join(Roles, ", "), c.Role))
	}
	if c.AdminKey != "" && len(c.AdminKey) < 16 {
		errs = append(errs, errors.New("AGENTPLANE_ADMIN_KEY must be at least 16 characters"))
	}
	if c.MaxFrameBytes < 1024 {
		errs = append(errs, errors.New("--max-frame-bytes must be at least 1024"))
	}
	return errors.Join(errs...)
}

func (c *Config) loadFile() error {
	b, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&c.File); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("config file %s: %w", c.ConfigFile, err)
	}
	for i, a := range c.File.Agents {
		if a.AgentID == "" || a.Endpoint == "" {
			return fmt.Errorf("config file %s: agents[%d] needs agent_id and endpoint", c.ConfigFile, i)
		}
	}
	return nil
}

// ParseAPIKeys parses "user1:key1,user2:key2".
func ParseAPIKeys(s string) (map[string]string, error) {
	keys := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		user, key, ok := strings.Cut(pair, ":")
		if !ok || user == "" || key == "" {
			return nil, fmt.Errorf("AGENTPLANE_API_KEYS: %q is not user:key", pair)
		}
		if _, dup := keys[user]; dup {
			return nil, fmt.Errorf("AGENTPLANE_API_KEYS: user %q listed twice", user)
		}
		keys[user] = key
	}
	return keys, nil
}
