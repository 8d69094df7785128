package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/bench/internal/benchproc"
	"github.com/agentplane/agentplane/internal/fakellm"
)

// limitsConfig turns every rate limit on, high enough that the load never
// meets it: what is measured is the cost of checking, not of refusing.
const limitsConfig = `limits:
  user_requests_per_second: 20000
  user_burst: 20000
  agent_requests_per_second: 20000
  agent_burst: 20000
`

// target is one platform process and its clients.
type target struct {
	name     string
	proc     *benchproc.Proc
	agentKey string
	ws       *websocket.Conn
	http     *http.Client
	proxy    []time.Duration
	ingress  []time.Duration
	refused  int
}

func limitsMain(args []string) error {
	fs := flag.NewFlagSet("limits", flag.ExitOnError)
	stores := fs.String("stores", "sqlite,postgres", "stores to measure")
	rounds := fs.Int("rounds", 6, "rounds; each measures both platforms in turn")
	n := fs.Int("n", 1000, "sequential requests per platform, path and round")
	fs.Parse(args)

	dir, err := os.MkdirTemp("", "bench-governance-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin, err := benchproc.BuildPlatform(dir)
	if err != nil {
		return err
	}
	up, err := fakellm.Start("127.0.0.1:0", fakellm.Options{})
	if err != nil {
		return err
	}
	defer up.Close()
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte(limitsConfig), 0o600); err != nil {
		return err
	}
	fmt.Printf("limits: %d rounds × %d sequential requests per platform and path; load %s\n", *rounds, *n, benchproc.LoadAvg())
	for _, store := range strings.Split(*stores, ",") {
		if err := limitsStore(bin, dir, store, up.URL, cfg, *rounds, *n); err != nil {
			return fmt.Errorf("%s: %w", store, err)
		}
	}
	return nil
}

func limitsStore(bin, dir, store, upstream, cfg string, rounds, n int) error {
	var targets []*target
	for _, t := range []struct {
		name string
		env  []string
	}{{"no limits", nil}, {"limits", []string{"AGENTPLANE_CONFIG=" + cfg}}} {
		dsn := "sqlite:" + filepath.Join(dir, strings.ReplaceAll(t.name, " ", "-")+"-"+store+".db")
		if store == "postgres" {
			var drop func()
			var err error
			if dsn, drop, err = benchproc.PostgresSchema(benchproc.PostgresURL()); err != nil {
				return err
			}
			defer drop()
		}
		env := append([]string{"AGENTPLANE_LLM_BASE_URL=" + upstream, "AGENTPLANE_LLM_API_KEY=sk-bench"}, t.env...)
		p, err := benchproc.StartPlatform(bin, dsn, env, nil)
		if err != nil {
			return err
		}
		defer p.Stop(10 * time.Second)
		tg := &target{name: t.name, proc: p, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
		if err := tg.setup(); err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		defer tg.ws.Close()
		targets = append(targets, tg)
	}
	body, _ := json.Marshal(map[string]any{"model": "fake-gpt", "messages": []any{map[string]any{"role": "user", "content": "hello"}}})
	// Request by request, the two platforms take turns, so drift and
	// neighbours' load hit both alike; the first tenth of each round warms up.
	for r := range rounds {
		for i := range n + n/10 {
			for _, tg := range targets {
				d, err := tg.proxyCall(body)
				if err != nil {
					return fmt.Errorf("%s: %w", tg.name, err)
				}
				if i >= n/10 {
					tg.proxy = append(tg.proxy, d)
				}
			}
		}
		for i := range n + n/10 {
			for _, tg := range targets {
				d, err := tg.ingressCall(fmt.Sprintf("r%d-%d", r, i))
				if err != nil {
					return fmt.Errorf("%s: %w", tg.name, err)
				}
				if i >= n/10 {
					tg.ingress = append(tg.ingress, d)
				}
			}
		}
	}
	fmt.Printf("\n%s\n", store)
	for _, path := range []string{"proxy", "ingress"} {
		var p50s []time.Duration
		for _, tg := range targets {
			s := tg.proxy
			if path == "ingress" {
				s = tg.ingress
			}
			p := percentiles(s)
			p50s = append(p50s, p.p50)
			fmt.Printf("  %-8s %-10s %s\n", path, tg.name, p)
		}
		fmt.Printf("  %-8s limits add %s µs at p50\n", path, us(p50s[1]-p50s[0]))
	}
	for _, tg := range targets {
		if tg.refused > 0 {
			fmt.Printf("  %s: %d requests refused (the load met the limit: the comparison is void)\n", tg.name, tg.refused)
		}
	}
	return nil
}

// register registers agentID at endpoint (admin key) and keeps its key.
func (tg *target) register(endpoint, agentID string) error {
	b, _ := json.Marshal(map[string]any{"agent_id": agentID, "endpoint": endpoint})
	req, _ := http.NewRequest("POST", tg.proc.URL+"/v1/agents/register", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+benchproc.AdminKey)
	resp, err := tg.http.Do(req)
	if err != nil {
		return err
	}
	var reg struct {
		Key string `json:"agent_api_key"`
	}
	err = json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	if err != nil || reg.Key == "" {
		return fmt.Errorf("register: %v", err)
	}
	tg.agentKey = reg.Key
	return nil
}

func (tg *target) setup() error {
	if err := tg.register("http://127.0.0.1:9", "bench-agent"); err != nil {
		return err
	}
	var err error
	tg.ws, _, err = websocket.DefaultDialer.Dial(tg.proc.WSURL("/v1/ws"), nil)
	if err != nil {
		return err
	}
	if err := tg.ws.WriteJSON(map[string]any{"type": "hello", "user_id": benchproc.UserID, "api_key": benchproc.UserKey}); err != nil {
		return err
	}
	var ready map[string]any
	if err := tg.ws.ReadJSON(&ready); err != nil || ready["type"] != "ready" {
		return fmt.Errorf("hello: %v %v", ready, err)
	}
	return nil
}

// proxyCall is one non-streaming chat completion through the LLM proxy with
// the agent key, timed from send to the last byte.
func (tg *target) proxyCall(body []byte) (time.Duration, error) {
	req, _ := http.NewRequest("POST", tg.proc.URL+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tg.agentKey)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := tg.http.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if resp.StatusCode == http.StatusTooManyRequests {
		tg.refused++
	} else if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("proxy answered %d", resp.StatusCode)
	}
	return d, err
}

// ingressCall is one WebSocket command and its reply: a subscribe to a
// session that does not exist (decode, rate limit, one indexed read,
// reply) — the cheapest command that writes nothing.
func (tg *target) ingressCall(requestID string) (time.Duration, error) {
	start := time.Now()
	if err := tg.ws.WriteJSON(map[string]any{"type": "subscribe", "request_id": requestID, "session_id": "no-such-session", "after_seq": 0}); err != nil {
		return 0, err
	}
	var m map[string]any
	if err := tg.ws.ReadJSON(&m); err != nil {
		return 0, err
	}
	d := time.Since(start)
	switch m["code"] {
	case "session_not_found":
	case "rate_limited":
		tg.refused++
	default:
		return 0, errors.New(fmt.Sprint("unexpected reply ", m))
	}
	return d, nil
}
