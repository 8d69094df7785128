package e2e

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/testdb"
)

// --pprof-addr serves Go's profiles on a listener of its own, and only
// there: the API's address, which faces clients, never does.
func TestPprofOnItsOwnListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	s := startServer(t, testdb.DSN(t, "sqlite"), "--pprof-addr", addr)

	resp, err := http.Get("http://" + addr + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		t.Fatalf("pprof listener: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("GET goroutine profile on --pprof-addr: %d %.200s", resp.StatusCode, body)
	}
	for _, key := range []string{"", adminKey} {
		req, _ := http.NewRequest("GET", s.URL+"/debug/pprof/goroutine?debug=1", nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || strings.Contains(string(body), "goroutine profile") {
			t.Fatalf("the API's address serves pprof (key %q): %d", key, resp.StatusCode)
		}
	}
}
