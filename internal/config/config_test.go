package config

import (
	"io"
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
		"short":    {env: map[string]string{"AGENTPLANE_ADMIN_KEY": "short"}, want: "16"},
		"args":     {args: []string{"extra"}, want: "unexpected"},
		"nofile":   {env: map[string]string{"AGENTPLANE_CONFIG": "/nonexistent.yaml"}, want: "config file"},
		"badflag":  {args: []string{"--nope"}, want: "not defined"},
		"frame":    {args: []string{"--max-frame-bytes", "10"}, want: "max-frame-bytes"},
		"badyaml":  {env: map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "agents: [{name: x}]")}, want: "agent_id"},
		"unknownk": {env: map[string]string{"AGENTPLANE_CONFIG": writeFile(t, "agentz: []")}, want: "agentz"},
		"conns":    {env: map[string]string{"AGENTPLANE_MAX_CONNECTIONS": "many"}, want: "AGENTPLANE_MAX_CONNECTIONS"},
		"negative": {args: []string{"--max-ws-per-user", "-1"}, want: "negative"},
		"body":     {args: []string{"--body-read-timeout", "0s"}, want: "body-read-timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Load(tc.args, env(tc.env), io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
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
