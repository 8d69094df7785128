// Package config turns environment variables, flags and the optional YAML
// file into one Config value (DESIGN §3). There are no globals: main builds
// a Config and passes it down.
package config

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Config is everything `agentplane serve` needs.
type Config struct {
	Addr              string
	DB                string // "sqlite:PATH" or "postgres://…"
	DBMaxConns        int    // PostgreSQL pool size of this process
	DBMaxIdleTime     time.Duration
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
	ShutdownGrace time.Duration
	// PprofAddr, when set, serves net/http/pprof on its own listener
	// (never on the API's address, which faces clients).
	PprofAddr             string
	AgentFirstByteTimeout time.Duration
	AgentIdleTimeout      time.Duration
	HealthInterval        time.Duration
	MaxFrameBytes         int

	// Output bounds of one run (issue 8): what an agent may stream into a
	// run, in bytes and in delta/state events, and how many bytes of
	// transcript an agent is sent in messages[].
	MaxRunOutputBytes  int64
	MaxRunEvents       int
	MaxTranscriptBytes int

	// Connection limits (issue 8 item 10): what an operator can promise
	// whatever clients do. Zero means no cap.
	MaxConnections                int           // open connections, HTTP and WebSocket
	MaxUnauthenticatedConnections int           // connections that have not presented a valid key yet; the oldest gives way
	MaxWSPerUser                  int           // WebSocket connections per user key, per process
	BodyReadTimeout               time.Duration // time to receive a request body (not streams)
	WSHelloTimeout                time.Duration // time for a WebSocket client's valid hello
	// MaxCallDepth refuses agent-to-agent calls that would run deeper than
	// this (DESIGN §11); 0 = unlimited, seed 002's decision.
	MaxCallDepth int

	// Logging (DESIGN §14): "json" (the default) or "text" lines on
	// stderr, at LogLevel (debug, info, warn, error).
	LogFormat string
	LogLevel  string

	File File // the YAML file, if any
}

// File is the optional YAML configuration (AGENTPLANE_CONFIG). Sections owned
// by other packages stay raw here and are decoded by their owners.
type File struct {
	Agents []AgentSpec `yaml:"agents"`
	LLM    yaml.Node   `yaml:"llm"`
	Tools  yaml.Node   `yaml:"tools"`
	// Governance (DESIGN §15; governance.go).
	Limits    Limits    `yaml:"limits"`
	Retention Retention `yaml:"retention"`
	// MCPServers are MCP servers used as tool sources (DESIGN §13), with
	// the fields of PUT /v1/mcp_servers/{name} plus name.
	MCPServers yaml.Node `yaml:"mcp_servers"`
}

// AgentSpec declares an agent to register at start. Its key is printed
// once, like a registration over HTTP.
type AgentSpec struct {
	AgentID      string   `yaml:"agent_id"`
	Name         string   `yaml:"name"`
	Description  string   `yaml:"description"`
	Endpoint     string   `yaml:"endpoint"`
	Capabilities []string `yaml:"capabilities"`
	LinkedAgents []string `yaml:"linked_agents"`
	SubAgentEcho string   `yaml:"sub_agent_echo"`
	// A2A serves the agent over A2A; Protocol "a2a" registers a remote A2A
	// agent (DESIGN §12).
	A2A      bool   `yaml:"a2a"`
	Protocol string `yaml:"protocol"`
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
	var envErrs []error
	envInt := func(name string, def int) int {
		v := getenv(name)
		if v == "" {
			return def
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s must be an integer, got %q", name, v))
			return def
		}
		return n
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var apiKeys string
	fs.StringVar(&c.Addr, "addr", env("AGENTPLANE_ADDR", "127.0.0.1:8080"), "listen address (AGENTPLANE_ADDR)")
	fs.StringVar(&c.DB, "db", env("AGENTPLANE_DB", "sqlite:./agentplane.db"), "sqlite:PATH or postgres:// URL (AGENTPLANE_DB)")
	fs.IntVar(&c.DBMaxConns, "db-max-conns", envInt("AGENTPLANE_DB_MAX_CONNS", 10), "most PostgreSQL connections this process opens (AGENTPLANE_DB_MAX_CONNS); the event listener holds one more")
	fs.DurationVar(&c.DBMaxIdleTime, "db-max-idle-time", time.Minute, "close a PostgreSQL connection unused this long")
	fs.StringVar(&c.AdminKey, "admin-key", env("AGENTPLANE_ADMIN_KEY", ""), "admin key; generated and printed if empty (AGENTPLANE_ADMIN_KEY)")
	fs.StringVar(&apiKeys, "api-keys", env("AGENTPLANE_API_KEYS", ""), "client keys user1:key1,user2:key2 (AGENTPLANE_API_KEYS)")
	fs.StringVar(&c.LLMBaseURL, "llm-base-url", env("AGENTPLANE_LLM_BASE_URL", ""), "upstream OpenAI-compatible base URL (AGENTPLANE_LLM_BASE_URL)")
	fs.StringVar(&c.LLMAPIKey, "llm-api-key", env("AGENTPLANE_LLM_API_KEY", ""), "key sent upstream (AGENTPLANE_LLM_API_KEY)")
	fs.StringVar(&c.EndpointAllowlist, "endpoint-allowlist", env("AGENTPLANE_ENDPOINT_ALLOWLIST", ""), "hosts/CIDRs agents may live on (AGENTPLANE_ENDPOINT_ALLOWLIST)")
	fs.StringVar(&c.ConfigFile, "config", env("AGENTPLANE_CONFIG", ""), "YAML file with agents, tools, prices (AGENTPLANE_CONFIG)")
	fs.StringVar(&c.Role, "role", env("AGENTPLANE_ROLE", "all"), "all | orchestrator | ingress")
	fs.BoolVar(&c.Demo, "demo", env("AGENTPLANE_DEMO", "") == "true", "start a demo agent and user key")
	fs.StringVar(&c.InstanceID, "instance-id", env("AGENTPLANE_INSTANCE_ID", ""), "stable id of this process, unique among the processes sharing a database (AGENTPLANE_INSTANCE_ID; default host/addr, plus a random suffix when the port is 0); runs a previous process with this id left unfinished are failed at start")
	fs.StringVar(&c.PprofAddr, "pprof-addr", env("AGENTPLANE_PPROF_ADDR", ""), "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6060), a listener of its own; off when empty (AGENTPLANE_PPROF_ADDR)")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight runs may finish on SIGTERM before they are failed")
	fs.DurationVar(&c.AgentFirstByteTimeout, "agent-first-byte-timeout", 30*time.Second, "time for an agent's first SSE event")
	fs.DurationVar(&c.AgentIdleTimeout, "agent-idle-timeout", 60*time.Second, "longest gap between an agent's SSE events")
	fs.DurationVar(&c.HealthInterval, "health-interval", 15*time.Second, "how often agents' /health is probed")
	fs.IntVar(&c.MaxFrameBytes, "max-frame-bytes", 1<<20, "largest WebSocket message accepted from a client")
	fs.Int64Var(&c.MaxRunOutputBytes, "max-run-output-bytes", int64(envInt("AGENTPLANE_MAX_RUN_OUTPUT_BYTES", 8<<20)), "bytes of deltas and states one run may stream before it fails output_too_large (AGENTPLANE_MAX_RUN_OUTPUT_BYTES)")
	fs.IntVar(&c.MaxRunEvents, "max-run-events", envInt("AGENTPLANE_MAX_RUN_EVENTS", 100_000), "delta and state events one run may stream before it fails output_too_large (AGENTPLANE_MAX_RUN_EVENTS)")
	fs.IntVar(&c.MaxTranscriptBytes, "max-transcript-bytes", envInt("AGENTPLANE_MAX_TRANSCRIPT_BYTES", 1<<20), "bytes of transcript content sent to an agent in messages[], newest first (AGENTPLANE_MAX_TRANSCRIPT_BYTES)")
	fs.IntVar(&c.MaxConnections, "max-connections", envInt("AGENTPLANE_MAX_CONNECTIONS", 10000), "open connections at most, HTTP and WebSocket; 0 = no cap (AGENTPLANE_MAX_CONNECTIONS)")
	fs.IntVar(&c.MaxUnauthenticatedConnections, "max-unauthenticated-connections", envInt("AGENTPLANE_MAX_UNAUTHENTICATED_CONNECTIONS", 1000), "connections that have not presented a valid key yet; over it the oldest is closed; 0 = no cap (AGENTPLANE_MAX_UNAUTHENTICATED_CONNECTIONS)")
	fs.IntVar(&c.MaxWSPerUser, "max-ws-per-user", envInt("AGENTPLANE_MAX_WS_PER_USER", 64), "WebSocket connections one user may hold open (on PostgreSQL across the replicas sharing the database); 0 = no cap (AGENTPLANE_MAX_WS_PER_USER)")
	fs.DurationVar(&c.BodyReadTimeout, "body-read-timeout", 30*time.Second, "time a client has to send a request body (streams are not cut)")
	fs.DurationVar(&c.WSHelloTimeout, "ws-hello-timeout", 10*time.Second, "time a WebSocket client has to say a valid hello")
	fs.IntVar(&c.MaxCallDepth, "max-call-depth", envInt("AGENTPLANE_MAX_CALL_DEPTH", 0), "deepest child run an agent-to-agent call may start; 0 = unlimited (AGENTPLANE_MAX_CALL_DEPTH)")
	fs.StringVar(&c.LogFormat, "log-format", env("AGENTPLANE_LOG_FORMAT", "json"), "log lines as json (DESIGN §14) or text, for reading in a terminal (AGENTPLANE_LOG_FORMAT)")
	fs.StringVar(&c.LogLevel, "log-level", env("AGENTPLANE_LOG_LEVEL", "info"), "least severe level logged: debug, info, warn or error (AGENTPLANE_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := errors.Join(envErrs...); err != nil {
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
	if err := c.File.checkGovernance(); err != nil {
		if c.ConfigFile != "" {
			err = fmt.Errorf("config file %s: %w", c.ConfigFile, err)
		}
		return nil, err
	}
	// Environment and flags override the file, as everywhere.
	wsSet := getenv("AGENTPLANE_MAX_WS_PER_USER") != ""
	fs.Visit(func(f *flag.Flag) { wsSet = wsSet || f.Name == "max-ws-per-user" })
	if !wsSet && c.File.Limits.MaxWSPerUser != nil {
		c.MaxWSPerUser = *c.File.Limits.MaxWSPerUser
	}
	if c.InstanceID == "" {
		c.InstanceID = defaultInstanceID(c.Addr)
	}
	return c, nil
}

// defaultInstanceID is host/addr. Two processes listening on port 0 of one
// host would share it, and an instance id belongs to one live process
// (issue 8: they failed each other's runs), so such a process gets a random
// suffix; it cannot be restarted on the same address anyway.
func defaultInstanceID(addr string) string {
	host, _ := os.Hostname()
	id := host + "/" + addr
	if _, port, err := net.SplitHostPort(addr); err == nil && port == "0" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		id += "/" + hex.EncodeToString(b[:])
	}
	return id
}

func (c *Config) validate() error {
	var errs []error
	if c.LogFormat != "text" && c.LogFormat != "json" {
		errs = append(errs, fmt.Errorf("AGENTPLANE_LOG_FORMAT must be text or json, got %q", c.LogFormat))
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("AGENTPLANE_LOG_LEVEL must be debug, info, warn or error, got %q", c.LogLevel))
	}
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
	if c.MaxFrameBytes < 1024 {
		errs = append(errs, errors.New("--max-frame-bytes must be at least 1024"))
	}
	if c.MaxRunOutputBytes < 1024 {
		errs = append(errs, errors.New("AGENTPLANE_MAX_RUN_OUTPUT_BYTES must be at least 1024"))
	}
	if c.MaxRunEvents < 1 {
		errs = append(errs, errors.New("AGENTPLANE_MAX_RUN_EVENTS must be at least 1"))
	}
	if c.MaxCallDepth < 0 {
		errs = append(errs, errors.New("AGENTPLANE_MAX_CALL_DEPTH must be 0 (unlimited) or more"))
	}
	if c.MaxTranscriptBytes < 1024 {
		errs = append(errs, errors.New("AGENTPLANE_MAX_TRANSCRIPT_BYTES must be at least 1024"))
	}
	if c.DBMaxConns < 2 {
		// A run's transaction and a concurrent read must both get one.
		errs = append(errs, fmt.Errorf("AGENTPLANE_DB_MAX_CONNS must be at least 2, got %d", c.DBMaxConns))
	}
	if c.DBMaxIdleTime <= 0 {
		errs = append(errs, errors.New("--db-max-idle-time must be positive"))
	}
	errs = append(errs, checkKeys(c.AdminKey, c.APIKeys)...)
	if c.MaxConnections < 0 || c.MaxUnauthenticatedConnections < 0 || c.MaxWSPerUser < 0 {
		errs = append(errs, errors.New("connection limits must not be negative (0 means no cap)"))
	}
	if c.BodyReadTimeout <= 0 || c.WSHelloTimeout <= 0 {
		errs = append(errs, errors.New("--body-read-timeout and --ws-hello-timeout must be positive"))
	}
	return errors.Join(errs...)
}

// checkKeys refuses keys that would make a request's identity ambiguous:
// one key for two users (whichever the lookup found first would own it)
// or a user key that is also the admin key. The messages name users,
// never keys.
func checkKeys(adminKey string, userKeys map[string]string) []error {
	var errs []error
	users := make([]string, 0, len(userKeys))
	for u := range userKeys {
		users = append(users, u)
	}
	sort.Strings(users)
	owner := map[string]string{}
	for _, u := range users {
		k := userKeys[u]
		if adminKey != "" && subtle.ConstantTimeCompare([]byte(k), []byte(adminKey)) == 1 {
			errs = append(errs, fmt.Errorf("AGENTPLANE_API_KEYS: the key of user %q is the admin key (AGENTPLANE_ADMIN_KEY); give every user a key of its own", u))
		}
		if first, dup := owner[k]; dup {
			errs = append(errs, fmt.Errorf("AGENTPLANE_API_KEYS: users %q and %q have the same key; a key must name one user", first, u))
			continue
		}
		owner[k] = u
	}
	return errs
}

func (c *Config) loadFile() error {
	b, err := os.ReadFile(c.ConfigFile)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	// First as nodes, for the numbers the typed decode would truncate
	// (numbers.go); then typed, refusing unknown keys.
	var root yaml.Node
	if err := yaml.Unmarshal(b, &root); err != nil {
		return fmt.Errorf("config file %s: %w", c.ConfigFile, err)
	}
	if err := errors.Join(checkNumbers(&root)...); err != nil {
		return fmt.Errorf("config file %s: %w", c.ConfigFile, err)
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
