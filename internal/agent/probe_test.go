package agent

import (
	"errors"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	srv := agentServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ok/health":
			_, _ = w.Write([]byte(`{"ok":true}`))
		case "/nocontent/health":
			w.WriteHeader(http.StatusNoContent)
		case "/sick/health":
			http.Error(w, "database down", http.StatusServiceUnavailable)
		case "/moved/health":
			http.Redirect(w, r, "/ok/health", http.StatusFound)
		case "/hang/health":
			waitGone(t, r)
		default:
			http.NotFound(w, r)
		}
	})
	c := testClient(t)
	c.FirstByteTimeout = 200 * time.Millisecond
	for _, ep := range []string{srv.URL + "/ok", srv.URL + "/ok/", srv.URL + "/nocontent"} {
		if err := c.Probe(t.Context(), ep); err != nil {
			t.Errorf("Probe(%s): %v", ep, err)
		}
	}
	for path, want := range map[string]struct {
		code   string
		status int
	}{
		"/sick":  {CodeAgentHTTPError, 503},
		"/moved": {CodeAgentHTTPError, 302},
		"":       {CodeAgentHTTPError, 404},
		"/hang":  {CodeAgentTimeout, 0},
	} {
		err := c.Probe(t.Context(), srv.URL+path)
		var ie *InvokeError
		if !errors.As(err, &ie) || ie.Code != want.code || ie.Status != want.status {
			t.Errorf("Probe(%s) = %v, want %s/%d", path, err, want.code, want.status)
		}
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if err := c.Probe(t.Context(), "http://"+addr); invokeCode(t, err) != CodeAgentUnreachable {
		t.Errorf("Probe(closed port) = %v", err)
	}
	if err := c.Probe(t.Context(), "file:///etc/passwd"); invokeCode(t, err) != CodeInvalidEndpoint {
		t.Errorf("Probe(file) = %v", err)
	}
}
