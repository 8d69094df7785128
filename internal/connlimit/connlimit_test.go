package connlimit

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// serve runs an HTTP server on a limited listener; a request with
// "Authorization: ok" authenticates its connection.
func serve(t *testing.T, limits Limits) (*Listener, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listen(ln, limits)
	srv := &http.Server{ConnContext: ConnContext, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "ok" {
			Authenticated(r.Context())
		}
		io.WriteString(w, "hi")
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l, ln.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// get sends one keep-alive request on c and reads the answer.
func get(t *testing.T, c net.Conn, auth string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nAuthorization: "+auth+"\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// closed reports whether the server closed c (it reads EOF or a reset).
func closed(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !strings.Contains(err.Error(), "timeout")
}

func waitStats(t *testing.T, l *Listener, open, unauth int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		o, u, _, _ := l.Stats()
		if o == open && u == unauth {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open %d unauthenticated %d, want %d %d", o, u, open, unauth)
		}
	}
}

func TestUnauthenticatedCapEvictsTheOldest(t *testing.T) {
	l, addr := serve(t, Limits{Unauthenticated: 3})
	authed := dial(t, addr)
	if resp := get(t, authed, "ok"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	silent := []net.Conn{dial(t, addr), dial(t, addr), dial(t, addr)}
	waitStats(t, l, 4, 3)
	// A fourth unauthenticated connection pushes out the oldest.
	fresh := dial(t, addr)
	if !closed(silent[0]) {
		t.Fatal("the oldest unauthenticated connection was kept")
	}
	waitStats(t, l, 4, 3)
	// The newcomer works and, once authenticated, frees its place.
	if resp := get(t, fresh, "ok"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	waitStats(t, l, 4, 2)
	// The authenticated connection was never a candidate.
	if resp := get(t, authed, "ok"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	if _, _, evicted, _ := l.Stats(); evicted != 1 {
		t.Fatalf("evicted %d", evicted)
	}
}

func TestTotalCapRefusesWithAnAnswer(t *testing.T) {
	l, addr := serve(t, Limits{Total: 2})
	a, b := dial(t, addr), dial(t, addr)
	get(t, a, "ok")
	get(t, b, "ok")
	waitStats(t, l, 2, 0)
	c := dial(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("refused connection: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"too_many_connections"`) || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("%s %s", resp.Status, body)
	}
	// A closed connection frees its place.
	a.Close()
	waitStats(t, l, 1, 0)
	if resp := get(t, dial(t, addr), "ok"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
}

// At the total cap an unauthenticated connection gives way before a new
// one is refused.
func TestTotalCapEvictsUnauthenticatedFirst(t *testing.T) {
	l, addr := serve(t, Limits{Total: 2})
	a := dial(t, addr)
	get(t, a, "ok")
	silent := dial(t, addr)
	waitStats(t, l, 2, 1)
	fresh := dial(t, addr)
	if !closed(silent) {
		t.Fatal("the unauthenticated connection was kept")
	}
	if resp := get(t, fresh, "ok"); resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	waitStats(t, l, 2, 0)
}
