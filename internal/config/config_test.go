package config

import (
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestDefaults(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:8080" || c.DB != "sqlite:./agentplane.db" || c.Role != "all" || len(c.APIKeys) != 0 || c.InstanceID == "" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestFlagsOverrideEnv(t *testing.T) {
	c, err := Load([]string{"--addr", "127.0.0.1:9999", "--role", "ingress"}, env(map[string]string{
		"AGENTPLANE_ADDR": "0.0.0.0:1", "AGENTPLANE_API_KEYS": "alice:k1, bob:k2", "AGENTPLANE_DB": "postgres://x/y",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Addr != "127.0.0.1:9999" || c.Role != "ingress" || c.APIKeys["bob"] != "k2" || c.DB != "postgres://x/y" {
		t.Fatalf("%+v", c)
	}
}

func TestLogFlags(t *testing.T) {
	// JSON by default (DESIGN §14: logs are log/slog JSON); text on request.
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.LogFormat != "json" || c.LogLevel != "info" {
		t.Fatalf("defaults: %v %q %q", err, c.LogFormat, c.LogLevel)
	}
	c, err = Load([]string{"--log-level", "debug"}, env(map[string]string{"AGENTPLANE_LOG_FORMAT": "text", "AGENTPLANE_LOG_LEVEL": "warn"}), io.Discard)
	if err != nil || c.LogFormat != "text" || c.LogLevel != "debug" {
		t.Fatalf("env and flags: %v %q %q", err, c.LogFormat, c.LogLevel)
	}
	c, err = Load([]string{"--log-format", "text"}, env(nil), io.Discard)
	if err != nil || c.LogFormat != "text" {
		t.Fatalf("--log-format text: %v %q", err, c.LogFormat)
	}
}

func TestConnectionLimits(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConnections != 10000 || c.MaxUnauthenticatedConnections != 1000 || c.MaxWSPerUser != 64 || c.BodyReadTimeout != 30*time.Second || c.WSHelloTimeout != 10*time.Second {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = Load([]string{"--max-ws-per-user", "3"}, env(map[string]string{"AGENTPLANE_MAX_CONNECTIONS": "0", "AGENTPLANE_MAX_UNAUTHENTICATED_CONNECTIONS": "50", "AGENTPLANE_MAX_WS_PER_USER": "9"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxConnections != 0 || c.MaxUnauthenticatedConnections != 50 || c.MaxWSPerUser != 3 {
		t.Fatalf("env and flags: %+v", c)
	}
}

func TestBadInput(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"db":       {env: map[string]string{"AGENTPLANE_DB": "mysql://x"}, want: "AGENTPLANE_DB"},
		"role":     {args: []string{"--role", "boss"}, want: "--role"},
		"keys":     {env: map[string]string{"AGENTPLANE_API_KEYS": "alice"}, want: "user:key"},
		"dup":      {env: map[string]string{"AGENTPLANE_API_KEYS": "a:1,a:2"}, want: "twice"},
		"args":     {args: []string{"extra"}, want: "unexpected"},
		"nofile":   {env: map[string]string{"AGENTPLANE_CONFIG": "/nonexistent.yaml"}, want: "config file"},
		"badflag":  {args: []string{"--nope"}, want: "not defined"},
		"frame":    {args: []string{"--max-frame-bytes", "10"}, want: "max-frame-bytes"},
		"badyaml":  {env: map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "agents: [{name: x}]")}, want: "agent_id"},
		"unknownk": {env: map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "agentz: []")}, want: "agentz"},
		// Issue 8, item 13: a key must name one principal.
		"samekey":     {env: map[string]string{"AGENTPLANE_API_KEYS": "alice:k-shared,bob:k-shared"}, want: `users "alice" and "bob" have the same key`},
		"adminkey":    {env: map[string]string{"AGENTPLANE_API_KEYS": "alice:the-admin-key-0123", "AGENTPLANE_ADMIN_KEY": "the-admin-key-0123"}, want: `the key of user "alice" is the admin key`},
		"adminflag":   {args: []string{"--admin-key", "the-admin-key-0123"}, env: map[string]string{"AGENTPLANE_API_KEYS": "bob:the-admin-key-0123"}, want: "AGENTPLANE_ADMIN_KEY"},
		"maxconns":    {env: map[string]string{"AGENTPLANE_DB_MAX_CONNS": "1"}, want: "AGENTPLANE_DB_MAX_CONNS"},
		"maxconnsNaN": {env: map[string]string{"AGENTPLANE_DB_MAX_CONNS": "many"}, want: "AGENTPLANE_DB_MAX_CONNS must be an integer"},
		"idletime":    {args: []string{"--db-max-idle-time", "0s"}, want: "db-max-idle-time"},
		"conns":       {env: map[string]string{"AGENTPLANE_MAX_CONNECTIONS": "many"}, want: "AGENTPLANE_MAX_CONNECTIONS"},
		"negative":    {args: []string{"--max-ws-per-user", "-1"}, want: "negative"},
		"body":        {args: []string{"--body-read-timeout", "0s"}, want: "body-read-timeout"},
		"logformat":   {env: map[string]string{"AGENTPLANE_LOG_FORMAT": "xml"}, want: "AGENTPLANE_LOG_FORMAT must be text or json"},
		"loglevel":    {args: []string{"--log-level", "loud"}, want: "AGENTPLANE_LOG_LEVEL must be"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(tc.args, env(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

// DESIGN §3 sets no rule for the admin key: a short one is accepted (the
// server logs a warning), so a test or a laptop may use "admin".
func TestShortAdminKeyAccepted(t *testing.T) {
	c, err := Load([]string{"--admin-key", "adm"}, env(nil), io.Discard)
	if err != nil || c.AdminKey != "adm" {
		t.Fatalf("short admin key: %+v, %v", c, err)
	}
}

// The error about a shared key names the users, never the key.
func TestKeyErrorsDoNotPrintKeys(t *testing.T) {
	_, err := Load(nil, env(map[string]string{"AGENTPLANE_API_KEYS": "alice:secret-value-1,bob:secret-value-1", "AGENTPLANE_ADMIN_KEY": "secret-value-1"}), io.Discard)
	if err == nil || strings.Contains(err.Error(), "secret-value-1") {
		t.Fatalf("err = %v", err)
	}
}

func TestDBPool(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.DBMaxConns != 10 || c.DBMaxIdleTime <= 0 {
		t.Fatalf("default pool: %+v, %v", c, err)
	}
	c, err = Load([]string{"--db-max-conns", "4"}, env(map[string]string{"AGENTPLANE_DB_MAX_CONNS": "20"}), io.Discard)
	if err != nil || c.DBMaxConns != 4 {
		t.Fatalf("flag over env: %d, %v", c.DBMaxConns, err)
	}
	c, err = Load(nil, env(map[string]string{"AGENTPLANE_DB_MAX_CONNS": "20"}), io.Discard)
	if err != nil || c.DBMaxConns != 20 {
		t.Fatalf("env: %d, %v", c.DBMaxConns, err)
	}
}

// Processes on port 0 get distinct default instance ids; a fixed address
// keeps a stable one (a restart takes over its runs).
func TestDefaultInstanceID(t *testing.T) {
	load := func(addr string) string {
		c, err := Load([]string{"--addr", addr}, env(nil), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return c.InstanceID
	}
	if a, b := load("127.0.0.1:0"), load("127.0.0.1:0"); a == b {
		t.Fatalf("two processes on port 0 share instance id %q", a)
	}
	if a, b := load("127.0.0.1:8080"), load("127.0.0.1:8080"); a != b {
		t.Fatalf("instance id of a fixed address changes: %q, %q", a, b)
	}
	c, _ := Load([]string{"--addr", "127.0.0.1:0"}, env(map[string]string{"AGENTPLANE_INSTANCE_ID": "mine"}), io.Discard)
	if c.InstanceID != "mine" {
		t.Fatalf("explicit instance id: %q", c.InstanceID)
	}
}

func TestConfigFileAgents(t *testing.T) {
	path := writeFile(t, "agents:\n  - agent_id: a1\n    name: A\n    endpoint: http://127.0.0.1:9001\n    capabilities: [chat]\n")
	c, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": path}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.File.Agents) != 1 || c.File.Agents[0].Capabilities[0] != "chat" {
		t.Fatalf("%+v", c.File)
	}
}

func writeFile(t *testing.T, body string) string {
	p := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Run output bounds (issue 8): defaults, env, flags over env, refusals.
func TestRunOutputBounds(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxRunOutputBytes != 8<<20 || c.MaxRunEvents != 100_000 || c.MaxTranscriptBytes != 1<<20 {
		t.Fatalf("defaults %d %d %d", c.MaxRunOutputBytes, c.MaxRunEvents, c.MaxTranscriptBytes)
	}
	c, err = Load([]string{"--max-run-events", "7"}, env(map[string]string{
		"AGENTPLANE_MAX_RUN_OUTPUT_BYTES": "65536", "AGENTPLANE_MAX_RUN_EVENTS": "9", "AGENTPLANE_MAX_TRANSCRIPT_BYTES": "4096",
	}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.MaxRunOutputBytes != 65536 || c.MaxRunEvents != 7 || c.MaxTranscriptBytes != 4096 {
		t.Fatalf("from env and flags %d %d %d", c.MaxRunOutputBytes, c.MaxRunEvents, c.MaxTranscriptBytes)
	}
	for name, tc := range map[string]struct {
		args []string
		env  map[string]string
		want string
	}{
		"not a number": {env: map[string]string{"AGENTPLANE_MAX_RUN_OUTPUT_BYTES": "8MiB"}, want: "AGENTPLANE_MAX_RUN_OUTPUT_BYTES"},
		"tiny output":  {args: []string{"--max-run-output-bytes", "10"}, want: "AGENTPLANE_MAX_RUN_OUTPUT_BYTES"},
		"no events":    {env: map[string]string{"AGENTPLANE_MAX_RUN_EVENTS": "0"}, want: "AGENTPLANE_MAX_RUN_EVENTS"},
		"tiny history": {args: []string{"--max-transcript-bytes", "100"}, want: "AGENTPLANE_MAX_TRANSCRIPT_BYTES"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := Load(tc.args, env(tc.env), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestGovernanceSections(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l, r := c.File.Limits, c.File.Retention
	if l.UserRequestsPerSecond != 0 || l.MaxActiveRuns != 0 || l.MaxActiveRunsPerUser != 0 || l.AgentKeyGraceSeconds != 0 || r.Enabled() ||
		r.SweepInterval != DefaultRetentionSweep || r.BatchSize != DefaultRetentionBatch {
		t.Fatalf("defaults: %+v %+v", l, r)
	}
	file := writeFile(t, `
limits:
  user_requests_per_second: 2.5
  agent_requests_per_second: 50
  agent_burst: 80
  max_active_runs_per_user: 1
  max_active_runs: 10
  max_ws_per_user: 5
  agent_key_grace_seconds: 300
retention:
  days: 30
  agents: {audit-bot: 365}
  sweep_interval: 10s
`)
	c, err = Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": file}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	l, r = c.File.Limits, c.File.Retention
	if l.UserBurst != 2 || l.AgentBurst != 80 || l.MaxActiveRunsPerUser != 1 || l.MaxActiveRuns != 10 || l.AgentKeyGraceSeconds != 300 || c.MaxWSPerUser != 5 {
		t.Fatalf("limits: %+v, ws %d", l, c.MaxWSPerUser)
	}
	if r.Days != 30 || r.Agents["audit-bot"] != 365 || r.SweepInterval != 10*time.Second || r.BatchSize != 500 {
		t.Fatalf("retention: %+v", r)
	}
	// The environment and flags win over the file.
	c, err = Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": file, "AGENTPLANE_MAX_WS_PER_USER": "7"}), io.Discard)
	if err != nil || c.MaxWSPerUser != 7 {
		t.Fatalf("env over file: %v %d", err, c.MaxWSPerUser)
	}
	c, err = Load([]string{"--max-ws-per-user", "0"}, env(map[string]string{"AGENTPLANE_CONFIG": file}), io.Discard)
	if err != nil || c.MaxWSPerUser != 0 {
		t.Fatalf("flag over file: %v %d", err, c.MaxWSPerUser)
	}
	for yml, want := range map[string]string{
		"limits: {user_requests_per_second: -1}": "must not be negative",
		"limits: {user_burst: 3}":                "user_burst needs user_requests_per_second",
		"limits: {max_active_runs: -2}":          "max_active_runs",
		"limits: {agent_key_grace_seconds: -1}":  "agent_key_grace_seconds",
		"limits: {max_rps: 1}":                   "max_rps",
		"retention: {days: -1}":                  "days must not be negative",
		"retention: {agents: {'bad id!': 3}}":    "not an agent id",
		"retention: {agents: {a: 0}}":            "at least 1",
		"retention: {sweep_interval: 10ms}":      "sweep_interval",
		"retention: {batch_size: 100000}":        "batch_size",
	} {
		_, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": writeFile(t, yml)}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", yml, err, want)
		}
	}
}

// AGENTPLANE_MAX_CALL_DEPTH (issue 9): 0 = unlimited by default, env and
// flag, negative refused.
func TestMaxCallDepth(t *testing.T) {
	c, err := Load(nil, env(nil), io.Discard)
	if err != nil || c.MaxCallDepth != 0 {
		t.Fatalf("default = %d, %v", c.MaxCallDepth, err)
	}
	c, err = Load(nil, env(map[string]string{"AGENTPLANE_MAX_CALL_DEPTH": "3"}), io.Discard)
	if err != nil || c.MaxCallDepth != 3 {
		t.Fatalf("env = %d, %v", c.MaxCallDepth, err)
	}
	c, err = Load([]string{"--max-call-depth", "2"}, env(map[string]string{"AGENTPLANE_MAX_CALL_DEPTH": "3"}), io.Discard)
	if err != nil || c.MaxCallDepth != 2 {
		t.Fatalf("flag over env = %d, %v", c.MaxCallDepth, err)
	}
	for _, bad := range []string{"-1", "deep"} {
		if _, err := Load(nil, env(map[string]string{"AGENTPLANE_MAX_CALL_DEPTH": bad}), io.Discard); err == nil || !strings.Contains(err.Error(), "AGENTPLANE_MAX_CALL_DEPTH") {
			t.Fatalf("%q: err = %v", bad, err)
		}
	}
}

// yaml.v3 truncates a float written where an integer goes (max_active_runs:
// 0.5 was 0, no cap) and takes .nan and .inf for a float (NaN passed the
// negative check and switched the rate limit off): each is refused at start,
// naming its key. Whole numbers written as floats still mean what they say.
func TestGovernanceNumbers(t *testing.T) {
	for yml, want := range map[string]string{
		"limits: {max_active_runs: 0.5}":                                                    "limits: max_active_runs must be a whole number, got 0.5",
		"limits: {max_active_runs_per_user: 0.9}":                                           "limits: max_active_runs_per_user must be a whole number, got 0.9",
		"limits: {max_active_runs_per_user: 1.9}":                                           "limits: max_active_runs_per_user must be a whole number, got 1.9",
		"limits: {max_ws_per_user: 2.5}":                                                    "limits: max_ws_per_user must be a whole number",
		"limits: {user_requests_per_second: 1, user_burst: 1.5}":                            "limits: user_burst must be a whole number",
		"limits: {agent_key_grace_seconds: -0.5}":                                           "limits: agent_key_grace_seconds must be a whole number",
		"limits: {max_active_runs: -1e300}":                                                 "limits: max_active_runs must be a whole number",
		"limits: {max_active_runs: .nan}":                                                   "limits: max_active_runs must be a whole number, got .nan",
		"retention: {days: 1.5}":                                                            "retention: days must be a whole number, got 1.5",
		"retention: {agents: {ag1: 2.5}}":                                                   "retention: agents: ag1 must be a whole number, got 2.5",
		"retention: {batch_size: 10.5}":                                                     "retention: batch_size must be a whole number",
		"limits: {user_requests_per_second: .nan}":                                          "limits: user_requests_per_second must be a finite number, got .nan",
		"limits: {agent_requests_per_second: .NaN}":                                         "limits: agent_requests_per_second must be a finite number",
		"limits: {user_requests_per_second: .inf}":                                          "limits: user_requests_per_second must be a finite number, got .inf",
		"limits: {agent_requests_per_second: -.Inf}":                                        "limits: agent_requests_per_second must be a finite number",
		"limits: {max_active_runs: &n 2, max_active_runs_per_user: &f 0.5, user_burst: *f}": "limits: user_burst must be a whole number",
		"limits:\n  <<: {max_active_runs: 0.5}":                                             "limits: max_active_runs must be a whole number",
	} {
		_, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": writeFile(t, yml)}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", yml, err, want)
		}
	}
	c, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "limits: {max_active_runs: 10.0, user_requests_per_second: 0.5}\nretention: {days: 3e1}")}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if l, r := c.File.Limits, c.File.Retention; l.MaxActiveRuns != 10 || l.UserRequestsPerSecond != 0.5 || l.UserBurst != 1 || r.Days != 30 {
		t.Fatalf("whole floats and a fractional rate: %+v %+v", l, r)
	}
	// A value set other than through the file (a test, a caller building
	// File) is refused by the range checks all the same.
	f := File{Limits: Limits{UserRequestsPerSecond: math.NaN(), AgentRequestsPerSecond: math.Inf(1)}}
	if err := f.checkGovernance(); err == nil || !strings.Contains(err.Error(), "user_requests_per_second") || !strings.Contains(err.Error(), "agent_requests_per_second") {
		t.Fatalf("NaN and Inf rates: %v", err)
	}
	f = File{Limits: Limits{UserRequestsPerSecond: 1e300}}
	if err := f.checkGovernance(); err != nil || f.Limits.UserBurst != math.MaxInt32 {
		t.Fatalf("a huge rate's default burst = %d, %v", f.Limits.UserBurst, err)
	}
}

// A retention longer than 100 years is refused at start, naming the key:
// from 106,752 days the sweeper's time.Duration overflowed and every ended
// session was deleted. (The sweeper saturates as well; see package
// retention.)
func TestRetentionDaysBound(t *testing.T) {
	for yml, want := range map[string]string{
		"retention: {days: 200000}":              "retention: days must not be negative (0 keeps sessions forever) nor more than 36500",
		"retention: {days: 36501}":               "retention: days",
		"retention: {agents: {ag1: 999999}}":     "retention: agents: ag1: days must be at least 1 and at most 36500",
		"retention: {days: 9223372036854775807}": "retention: days",
	} {
		_, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": writeFile(t, yml)}), io.Discard)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", yml, err, want)
		}
	}
	c, err := Load(nil, env(map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "retention: {days: 36500, agents: {ag1: 36500}}")}), io.Discard)
	if err != nil || c.File.Retention.Days != MaxRetentionDays || c.File.Retention.Agents["ag1"] != MaxRetentionDays {
		t.Fatalf("100 years: %v", err)
	}
}
