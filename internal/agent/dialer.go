package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// DialContext dials addr ("host:port") only if the allowlist allows it, so a
// name that passed ValidateEndpoint but now resolves somewhere private (DNS
// rebinding) is refused here. It resolves the host itself, checks every
// address, then dials them in order; the dialer's Control hook checks the
// address again just before connect(2), the last point where the check and
// the connection cannot drift apart. A refusal is an *EndpointError with
// CodeEndpointNotAllowed (wrapped in *net.OpError when the hook refuses).
func (a *Allowlist) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("dial %s: bad port: %w", addr, err)
	}

	var ips []netip.Addr
	hostOK := false
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		hostOK = a.hostAllowed(host)
		ips, err = a.lookup(ctx, host)
		if err != nil {
			return nil, fmt.Errorf("dial %s: %w", addr, err)
		}
	}
	ips = filterFamily(network, ips)
	if len(ips) == 0 {
		return nil, &net.OpError{Op: "dial", Net: network, Err: &net.AddrError{Err: "no suitable address", Addr: host}}
	}
	if !hostOK {
		if err := a.checkAddrs(host, ips); err != nil {
			return nil, err
		}
	}

	d := &net.Dialer{
		Timeout:        10 * time.Second,
		KeepAlive:      30 * time.Second,
		ControlContext: a.control(hostOK),
	}
	var first error
	for _, ip := range ips {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(ip, uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		var ee *EndpointError
		if errors.As(err, &ee) || ctx.Err() != nil {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// control returns the net.Dialer hook that refuses a socket whose remote
// address is not allowed. An allowlisted hostname may go anywhere.
func (a *Allowlist) control(hostAllowed bool) func(ctx context.Context, network, address string, c syscall.RawConn) error {
	return func(_ context.Context, _, address string, _ syscall.RawConn) error {
		if hostAllowed {
			return nil
		}
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return notAllowed("cannot check address %q", address)
		}
		if !a.addrAllowed(ap.Addr()) {
			return notAllowed("address %s is not public and not on the allowlist", ap.Addr())
		}
		return nil
	}
}

func filterFamily(network string, ips []netip.Addr) []netip.Addr {
	var want func(netip.Addr) bool
	switch network {
	case "tcp4", "udp4":
		want = func(ip netip.Addr) bool { return ip.Unmap().Is4() }
	case "tcp6", "udp6":
		want = func(ip netip.Addr) bool { return ip.Is6() && !ip.Is4In6() }
	default:
		return ips
	}
	out := ips[:0:0]
	for _, ip := range ips {
		if want(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// NewHTTPClient returns a client for agents and HTTP tools that dials only
// through a.DialContext (a nil a allows public addresses only), ignores the
// proxy environment variables (a proxy would do the dialling and bypass the
// check) and never follows redirects (a redirect could point anywhere; the 3xx
// response is returned as is). It has no overall timeout because invoke
// streams last as long as the run; callers bound them with contexts.
func NewHTTPClient(a *Allowlist) *http.Client {
	tr := &http.Transport{
		Proxy:             nil,
		DialContext:       a.DialContext,
		ForceAttemptHTTP2: true,
		MaxIdleConns:      256,
		// An agent or a tool is one host that many runs call at once: keep
		// a connection for each request in flight, not the 2 idle ones per
		// host net/http keeps by default — beyond them every answered
		// request closed its connection and the next opened a new one (300+
		// new TCP connections per 2,000 tool calls from 8 callers).
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
