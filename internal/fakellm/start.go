package fakellm

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Running is a fake served on its own listener (see Start).
type Running struct {
	*Server
	// URL is the API base to configure as an upstream, e.g.
	// "http://127.0.0.1:41234/v1".
	URL string
	srv *http.Server
}

// Start serves a fake LLM on addr ("127.0.0.1:0" picks a free port) until
// Close. The binary's --demo mode uses it as the LLM upstream.
func Start(addr string, opts Options) (*Running, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := New(opts)
	// No WriteTimeout: it would cut streams.
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = ln.Close()
		}
	}()
	return &Running{Server: s, URL: "http://" + ln.Addr().String() + "/v1", srv: srv}, nil
}

// Close stops the server, waiting up to 5 s for answers in progress.
func (r *Running) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.srv.Shutdown(ctx); err != nil {
		return r.srv.Close()
	}
	return nil
}
