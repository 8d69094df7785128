package server

import (
	"io"
	"net/http"
	"time"
)

// bodyDeadline gives each request body at most d to arrive (issue 8: only
// the headers had a deadline, so a client trickling a body held its
// connection for as long as it liked). http.Server's ReadTimeout cannot do
// this: it also covers what follows the body, and net/http cancels a
// request whose connection read fails, which would cut SSE streams and
// long-polls. So the deadline is set only while a body is being read and
// cleared when it has been read to the end; a request without a body
// (GET, WebSocket upgrades, :wait) gets none, and a hijacked connection's
// deadline is cleared by net/http. A handler that answers without reading
// the body leaves the deadline in place, so net/http's discarding of the
// rest cannot be trickled either.
func bodyDeadline(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the read deadline once the body has been read to
// its end: from then on reads of the connection are net/http's (it
// watches for the client going away) and must not time out.
type deadlineBody struct {
	io.ReadCloser
	clear func()
	done  bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.clear()
	}
	return n, err
}
