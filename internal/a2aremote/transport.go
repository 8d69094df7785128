package a2aremote

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptrace"
	"sync"

	"github.com/agentplane/agentplane/internal/agent"
)

// callState is what the transport saw of one call's HTTP exchange, so an
// error from the A2A library (which reports most failures as plain text)
// is classified by what happened on the wire: no connection, a non-2xx
// answer, a broken stream, or an answer that does not parse.
type callState struct {
	mu          sync.Mutex
	connected   bool
	answered    bool
	status      int
	contentType string
	readErr     error // a read of the body that failed (not EOF)
	activity    func()
}

type stateKey struct{}

func withState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, stateKey{}, st)
}

// tracker is the RoundTripper of A2A calls: the SSRF-checked transport,
// recording into the request's callState.
type tracker struct{ base http.RoundTripper }

func (t *tracker) RoundTrip(r *http.Request) (*http.Response, error) {
	st, _ := r.Context().Value(stateKey{}).(*callState)
	if st == nil {
		return t.base.RoundTrip(r)
	}
	r = r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) { st.mu.Lock(); st.connected = true; st.mu.Unlock() },
	}))
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	st.mu.Lock()
	st.answered, st.status, st.contentType = true, resp.StatusCode, resp.Header.Get("Content-Type")
	st.mu.Unlock()
	st.touch()
	resp.Body = &trackedBody{ReadCloser: resp.Body, st: st}
	return resp, nil
}

func (st *callState) touch() {
	st.mu.Lock()
	fn := st.activity
	st.mu.Unlock()
	if fn != nil {
		fn()
	}
}

// trackedBody reports bytes as activity (the idle timer) and keeps the
// first read error.
type trackedBody struct {
	io.ReadCloser
	st *callState
}

func (b *trackedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 {
		b.st.touch()
	}
	if err != nil && !errors.Is(err, io.EOF) {
		b.st.mu.Lock()
		if b.st.readErr == nil {
			b.st.readErr = err
		}
		b.st.mu.Unlock()
	}
	return n, err
}

// classify turns an error of a call into the run's error (DESIGN §5's
// codes): the cause the call's ctx was cancelled with (a timeout) wins;
// then the endpoint refused by the SSRF rules; no connection →
// agent_unreachable; a non-2xx answer → agent_http_error; the body broke
// → agent_disconnected; the remote's own JSON-RPC error → agent_error;
// anything else (an answer that does not parse as A2A) →
// agent_protocol_error.
func (st *callState) classify(ctx context.Context, err error) error {
	if ie, ok := context.Cause(ctx).(*agent.InvokeError); ok {
		return ie
	}
	var ie *agent.InvokeError
	if errors.As(err, &ie) {
		return ie
	}
	var ee *agent.EndpointError
	if errors.As(err, &ee) {
		return &agent.InvokeError{Code: ee.Code, Message: ee.Message, Err: err}
	}
	st.mu.Lock()
	connected, answered, status, readErr := st.connected, st.answered, st.status, st.readErr
	st.mu.Unlock()
	remoteErr, isRemoteErr := remoteErrorText(err)
	switch {
	case !answered && !connected:
		return &agent.InvokeError{Code: agent.CodeAgentUnreachable, Message: "cannot connect to the A2A agent: " + err.Error(), Err: err}
	case !answered:
		return &agent.InvokeError{Code: agent.CodeAgentDisconnected, Message: "the A2A agent closed the connection before answering: " + err.Error(), Err: err}
	case status < 200 || status > 299:
		return &agent.InvokeError{Code: agent.CodeAgentHTTPError, Status: status, Message: fmt.Sprintf("the A2A agent answered HTTP %d", status), Err: err}
	case readErr != nil:
		return &agent.InvokeError{Code: agent.CodeAgentDisconnected, Message: "the A2A agent's answer broke off: " + readErr.Error(), Err: err}
	case isRemoteErr:
		return &agent.InvokeError{Code: agent.CodeAgentError, Message: "the A2A agent answered " + remoteErr, Err: err}
	}
	return &agent.InvokeError{Code: agent.CodeAgentProtocolError, Message: "the A2A agent's answer is not valid A2A: " + err.Error(), Err: err}
}

// streamed reports whether the answer was declared an event stream.
func (st *callState) streamed() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	mt, _, _ := mime.ParseMediaType(st.contentType)
	return mt == "text/event-stream"
}
