package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentplane/agentplane/internal/fakellm"
)

// trickle opens a raw connection, sends head, then one byte of body every
// 100 ms until the connection fails or stop is closed.
func trickle(t *testing.T, s *server, head string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			time.Sleep(100 * time.Millisecond)
			if _, err := conn.Write([]byte(" ")); err != nil {
				return
			}
		}
	}()
	return conn, bufio.NewReader(conn)
}

// closedWithin reports whether the server closes conn within d.
func closedWithin(conn net.Conn, rd *bufio.Reader, d time.Duration) bool {
	conn.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, rd)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return false
	}
	return true
}

// A request body has --body-read-timeout to arrive: a client trickling one
// (with a key or without) no longer holds its connection for as long as it
// likes. Streams answering a request are not cut by it.
func TestBodiesHaveAReadDeadline(t *testing.T) {
	up := httptest.NewServer(fakellm.New(fakellm.Options{ChunkDelay: 150 * time.Millisecond}))
	t.Cleanup(up.Close)
	s := startServerEnv(t, "sqlite:"+t.TempDir()+"/a.db", []string{"AGENTPLANE_LLM_BASE_URL=" + up.URL + "/v1"}, "--body-read-timeout", "1s")

	t.Run("a trickled body with a key gets 408 and the connection ends", func(t *testing.T) {
		// The JSON decoders and the routes that read a body whole first (an
		// MCP server's spec, A2A's JSON-RPC; a child invoke's shares their
		// reader).
		if code, body := s.call("POST", "/v1/agents/register", adminKey, map[string]any{"agent_id": "slow-a2a", "endpoint": newScriptedAgent(t, modeStream, 1).URL, "a2a": true}); code != http.StatusCreated {
			t.Fatalf("register: %d %v", code, body)
		}
		for _, head := range []string{
			"POST /v1/agents/register HTTP/1.1\r\nAuthorization: Bearer " + adminKey,
			"PUT /v1/mcp_servers/slow HTTP/1.1\r\nAuthorization: Bearer " + adminKey,
			"POST /a2a/slow-a2a HTTP/1.1\r\nAuthorization: Bearer alice-key",
		} {
			conn, rd := trickle(t, s, head+"\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
			conn.SetReadDeadline(time.Now().Add(15 * time.Second))
			resp, err := http.ReadResponse(rd, nil)
			if err != nil {
				t.Fatalf("%s: no answer to a trickled body: %v", head, err)
			}
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(body), `"code":"request_timeout"`) {
				t.Fatalf("%s: %s %s", head, resp.Status, body)
			}
			if !closedWithin(conn, rd, 10*time.Second) {
				t.Fatalf("%s: the connection stayed open", head)
			}
		}
	})

	t.Run("a trickled body without a key is answered and cut", func(t *testing.T) {
		conn, rd := trickle(t, s, "POST /v1/agents/register HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")
		conn.SetReadDeadline(time.Now().Add(15 * time.Second))
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%v %v", resp, err)
		}
		io.Copy(io.Discard, resp.Body)
		// net/http reads the rest of the body to reuse the connection:
		// before the deadline it waited for the whole trickle (100 s).
		if !closedWithin(conn, rd, 10*time.Second) {
			t.Fatal("the connection stayed open while the client trickled")
		}
	})

	t.Run("a stream longer than the body deadline is not cut", func(t *testing.T) {
		ag := newScriptedAgent(t, modeStream, 1)
		key := s.register("llm-user", ag.URL)
		body, _ := json.Marshal(map[string]any{"model": "fake-gpt", "stream": true, "messages": []map[string]string{{"role": "user", "content": "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"}}})
		req, _ := http.NewRequest("POST", s.URL+"/v1/chat/completions", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+key)
		began := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != 200 || !strings.Contains(string(raw), "data: [DONE]") || !strings.Contains(string(raw), "fourteen") {
			t.Fatalf("%d %v %s", resp.StatusCode, err, raw)
		}
		if d := time.Since(began); d < 1500*time.Millisecond {
			t.Fatalf("the stream took %v, not longer than the body deadline: the test proves nothing", d)
		}
	})
}

// The connection caps: unauthenticated connections beyond
// --max-unauthenticated-connections push out the oldest of them; at
// --max-connections with every connection authenticated a new one is
// answered 503 too_many_connections.
func TestConnectionCaps(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--max-connections", "6", "--max-unauthenticated-connections", "3")
	addr := strings.TrimPrefix(s.URL, "http://")
	silent := func() (net.Conn, *bufio.Reader) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn, bufio.NewReader(conn)
	}
	var raws []net.Conn
	var rds []*bufio.Reader
	for range 4 {
		c, rd := silent()
		raws, rds = append(raws, c), append(rds, rd)
	}
	// The fourth silent connection pushed out the first.
	if !closedWithin(raws[0], rds[0], 5*time.Second) {
		t.Fatal("4 unauthenticated connections open with a cap of 3")
	}
	// A client that authenticates at once still gets in (evicting the
	// next oldest stranger), and so do more, up to the total.
	var clients []*client
	for range 4 {
		clients = append(clients, dial(t, s, "alice", "alice-key"))
	}
	if !closedWithin(raws[1], rds[1], 5*time.Second) {
		t.Fatal("the second-oldest stranger was kept")
	}
	// 4 clients + 2 strangers = 6: the next connection takes a stranger's place.
	c5 := dial(t, s, "alice", "alice-key")
	if !closedWithin(raws[2], rds[2], 5*time.Second) {
		t.Fatal("at the total cap a stranger was kept")
	}
	raws[3].Close()
	clients = append(clients, c5, dial(t, s, "alice", "alice-key"))

	// Six authenticated connections: the seventh is refused with an answer.
	refused := func() bool {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusServiceUnavailable {
			if !strings.Contains(string(body), `"code":"too_many_connections"`) {
				t.Fatalf("refusal %s", body)
			}
			return true
		}
		return false
	}
	if !refused() {
		t.Fatal("a seventh connection was accepted with a cap of 6")
	}
	// The authenticated connections were never touched.
	for _, c := range clients {
		c.send(map[string]any{"type": "cancel_run", "request_id": "x", "run_id": "run_nope"})
		if m := c.next(); m["code"] != "run_not_found" {
			t.Fatalf("authenticated connection: %v", m)
		}
	}
	// A closed connection frees its place.
	clients[0].conn.Close()
	for deadline := time.Now().Add(10 * time.Second); refused(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not free its place")
		}
	}
}

// --max-ws-per-user bounds the WebSocket connections of one user key.
func TestWebSocketConnectionsPerUser(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--max-ws-per-user", "2")
	a1 := dial(t, s, "alice", "alice-key")
	dial(t, s, "alice", "alice-key")
	over := dialRaw(t, s)
	over.send(map[string]any{"type": "hello", "user_id": "alice", "api_key": "alice-key", "request_id": "h"})
	if m := over.next(); m["type"] != "error" || m["code"] != "too_many_connections" || m["request_id"] != "h" {
		t.Fatalf("third connection: %v", m)
	}
	if _, err := over.read(5 * time.Second); !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
		t.Fatalf("third connection not closed: %v", err)
	}
	dial(t, s, "bob", "bob-key") // another user is not affected
	a1.conn.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		c := dialRaw(t, s)
		c.send(map[string]any{"type": "hello", "user_id": "alice", "api_key": "alice-key"})
		if m := c.next(); m["type"] == "ready" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a closed connection did not free its place")
		}
	}
}

// A WebSocket client has --ws-hello-timeout to say a valid hello; pongs
// sent meanwhile (once enough to keep it open) do not extend it.
func TestWebSocketHelloDeadline(t *testing.T) {
	s := startServer(t, "sqlite:"+t.TempDir()+"/a.db", "--ws-hello-timeout", "1s")
	for name, keepAlive := range map[string]bool{"silent": false, "sending pongs": true} {
		t.Run(name, func(t *testing.T) {
			c := dialRaw(t, s)
			stop := make(chan struct{})
			defer close(stop)
			if keepAlive {
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(200 * time.Millisecond):
						}
						if c.conn.WriteControl(websocket.PongMessage, nil, time.Now().Add(time.Second)) != nil {
							return
						}
					}
				}()
			}
			// Told why (error hello_timeout), then closed with 1008.
			if m, err := c.read(10 * time.Second); err != nil || m["type"] != "error" || m["code"] != "hello_timeout" {
				t.Fatalf("a connection without hello: %v, %v", m, err)
			}
			_, err := c.read(10 * time.Second)
			if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Fatalf("a connection without hello stayed open or was not closed with 1008: %v", err)
			}
		})
	}
	t.Run("a hello in time keeps the connection", func(t *testing.T) {
		c := dial(t, s, "alice", "alice-key")
		time.Sleep(1500 * time.Millisecond)
		c.send(map[string]any{"type": "cancel_run", "request_id": "x", "run_id": "run_nope"})
		if m := c.next(); m["code"] != "run_not_found" {
			t.Fatalf("%v", m)
		}
	})
}
