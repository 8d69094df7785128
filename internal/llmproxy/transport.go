package llmproxy

import (
	"net"
	"net/http"
	"time"
)

// newTransport is the upstream transport. Sized for 1,000 req/s with
// long-lived streams: connections are reused (keep-alive) and enough of them
// stay idle between bursts that a burst does not pay for new dials; there is
// no cap on connections per host because an LLM stream holds its connection
// for its whole generation. HTTP/1.1 only: one stream per connection keeps
// head-of-line blocking and HTTP/2 flow-control windows out of the latency.
func newTransport(t Timeouts) *http.Transport {
	d := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   t.Connect,
		MaxIdleConns:          4096,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: 0,
		// The proxy asks for identity itself and must see the bytes as sent:
		// transparent gzip would hide Content-Encoding and re-buffer streams.
		DisableCompression: true,
		ForceAttemptHTTP2:  false,
		// Read/write buffers stay at the 4 KiB default: an LLM stream holds
		// its connection for seconds, so at 1,000 req/s thousands are open
		// at once and per-connection memory is what counts. Large bodies
		// bypass the bufio buffers anyway.
	}
}
