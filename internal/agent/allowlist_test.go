package agent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// fakeDNS maps names to addresses for Allowlist.LookupIP; unknown names fail
// like NXDOMAIN. It stands in for DNS, which these tests must not depend on.
func fakeDNS(m map[string][]string) func(context.Context, string) ([]net.IP, error) {
	return func(_ context.Context, host string) ([]net.IP, error) {
		addrs, ok := m[host]
		if !ok {
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		}
		var ips []net.IP
		for _, a := range addrs {
			ips = append(ips, net.ParseIP(a))
		}
		return ips, nil
	}
}

func mustAllowlist(t testing.TB, s string) *Allowlist {
	t.Helper()
	a, err := ParseAllowlist(s)
	if err != nil {
		t.Fatalf("ParseAllowlist(%q): %v", s, err)
	}
	return a
}

func endpointCode(err error) string {
	var ee *EndpointError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ""
}

func TestParseAllowlist(t *testing.T) {
	t.Parallel()
	for _, good := range []string{
		"", " , ,", "127.0.0.1/32,::1/128", "10.0.0.0/8, agents.internal", "10.1.2.3/8",
		"192.168.1.5", "fd00::1", ".corp.internal", "*.corp.internal", "Agents.Internal.", "agent_1.svc",
	} {
		if _, err := ParseAllowlist(good); err != nil {
			t.Errorf("ParseAllowlist(%q): %v", good, err)
		}
	}
	for _, bad := range []string{
		"10.0.0.0/33", "10.0.0/8", "1.2.3.4/x", "http://agents.internal", "agents.internal:8080",
		"a b", "a..b", "*", ".", "fe80::1%eth0", "-/-",
	} {
		if _, err := ParseAllowlist(bad); err == nil {
			t.Errorf("ParseAllowlist(%q) succeeded", bad)
		}
	}
}

func TestValidateEndpointPublicOnly(t *testing.T) {
	t.Parallel()
	dns := fakeDNS(map[string][]string{
		"public.test":  {"93.184.216.34", "2606:2800:220:1::1"},
		"private.test": {"10.1.2.3"},
		"mixed.test":   {"8.8.8.8", "192.168.0.1"},
		"meta.test":    {"169.254.169.254"},
		"mapped.test":  {"::ffff:127.0.0.1"},
		"empty.test":   {},
	})
	for _, a := range []*Allowlist{nil, {LookupIP: dns}, mustAllowlist(t, "")} {
		if a != nil && a.LookupIP == nil {
			a.LookupIP = dns
		}
		tests := []struct {
			url, code string // code "" = allowed
		}{
			// Not a usable URL at all.
			{"file:///etc/passwd", CodeInvalidEndpoint},
			{"gopher://example.com/", CodeInvalidEndpoint},
			{"ftp://example.com/", CodeInvalidEndpoint},
			{"/invoke", CodeInvalidEndpoint},
			{"example.com", CodeInvalidEndpoint},
			{"http:example.com", CodeInvalidEndpoint},
			{"http:///path", CodeInvalidEndpoint},
			{"http://user:pw@example.com", CodeInvalidEndpoint},
			{"http://user@8.8.8.8/", CodeInvalidEndpoint},
			{"http://8.8.8.8/#frag", CodeInvalidEndpoint},
			{"http://8.8.8.8/#", CodeInvalidEndpoint},
			{"http://8.8.8.8:0/", CodeInvalidEndpoint},
			{"http://8.8.8.8:65536/", CodeInvalidEndpoint},
			{"http://8.8.8.8:x/", CodeInvalidEndpoint},
			{"http://%zz/", CodeInvalidEndpoint},
			{"http://nx.test/", CodeInvalidEndpoint},
			{"http://empty.test/", CodeInvalidEndpoint},
			// Addresses that reach us, our network or metadata services.
			{"http://169.254.169.254/", CodeEndpointNotAllowed},
			{"http://169.254.169.254/latest/meta-data/", CodeEndpointNotAllowed},
			{"http://[fd00:ec2::254]/", CodeEndpointNotAllowed},
			{"http://100.100.100.200/", CodeEndpointNotAllowed},
			{"http://10.0.0.1/", CodeEndpointNotAllowed},
			{"http://172.16.0.1/", CodeEndpointNotAllowed},
			{"http://172.31.255.255/", CodeEndpointNotAllowed},
			{"http://192.168.1.1/", CodeEndpointNotAllowed},
			{"http://127.0.0.1:8080/", CodeEndpointNotAllowed},
			{"http://127.1.2.3/", CodeEndpointNotAllowed},
			{"http://0.0.0.0/", CodeEndpointNotAllowed},
			{"http://[::]/", CodeEndpointNotAllowed},
			{"http://[::1]/", CodeEndpointNotAllowed},
			{"http://[::ffff:127.0.0.1]/", CodeEndpointNotAllowed},
			{"http://[::ffff:169.254.169.254]/", CodeEndpointNotAllowed},
			{"http://[::ffff:a00:1]/", CodeEndpointNotAllowed},
			{"http://[::10.0.0.1]/", CodeEndpointNotAllowed},
			{"http://[64:ff9b::a00:1]/", CodeEndpointNotAllowed},
			{"http://[2002:a9fe:a9fe::]/", CodeEndpointNotAllowed},
			{"http://[fe80::1%25eth0]/", CodeEndpointNotAllowed},
			{"http://[fc00::1]/", CodeEndpointNotAllowed},
			{"http://[ff02::1]/", CodeEndpointNotAllowed},
			{"http://224.0.0.1/", CodeEndpointNotAllowed},
			{"http://255.255.255.255/", CodeEndpointNotAllowed},
			{"http://100.64.0.1/", CodeEndpointNotAllowed},
			{"http://private.test/", CodeEndpointNotAllowed},
			{"http://mixed.test/", CodeEndpointNotAllowed},
			{"http://meta.test/", CodeEndpointNotAllowed},
			{"http://mapped.test/", CodeEndpointNotAllowed},
			// Public.
			{"http://8.8.8.8/", ""},
			{"HTTPS://8.8.8.8:8443/base/?k=v", ""},
			{"https://[2606:4700:4700::1111]/", ""},
			{"http://[::ffff:8.8.8.8]/", ""},
			{"http://[64:ff9b::808:808]/", ""},
			{"http://[2002:808:808::1]/", ""},
			{"http://100.128.0.1/", ""},
			{"http://public.test:8000/agent", ""},
		}
		for _, tt := range tests {
			if a == nil && strings.Contains(tt.url, ".test") {
				continue // a nil allowlist uses real DNS
			}
			u, err := a.ValidateEndpoint(context.Background(), tt.url)
			if got := endpointCode(err); got != tt.code {
				t.Errorf("ValidateEndpoint(%q) = %v (code %q), want code %q", tt.url, err, got, tt.code)
			}
			if tt.code == "" && (u == nil || u.Scheme != "http" && u.Scheme != "https") {
				t.Errorf("ValidateEndpoint(%q) URL = %v", tt.url, u)
			}
		}
	}
}

// localhost resolves to loopback with the real resolver (hosts file), which
// only an allowlist may open.
func TestValidateEndpointLocalhost(t *testing.T) {
	t.Parallel()
	if _, err := (*Allowlist)(nil).ValidateEndpoint(context.Background(), "http://localhost:8080/"); endpointCode(err) != CodeEndpointNotAllowed {
		t.Fatalf("localhost without allowlist: %v", err)
	}
	a := mustAllowlist(t, "127.0.0.0/8,::1/128")
	if _, err := a.ValidateEndpoint(context.Background(), "http://localhost:8080/"); err != nil {
		t.Fatalf("localhost with loopback allowlisted: %v", err)
	}
}

func TestValidateEndpointAllowlist(t *testing.T) {
	t.Parallel()
	a := mustAllowlist(t, "127.0.0.1/32, 10.0.0.0/8, fd12::/16, agents.internal, .corp.internal")
	var lookups atomic.Int32
	dns := fakeDNS(map[string][]string{
		"corp.internal":     {"10.0.0.5"},
		"evilcorp.internal": {"192.168.9.9"},
		"in-range.test":     {"10.3.3.3", "8.8.8.8"},
	})
	a.LookupIP = func(ctx context.Context, host string) ([]net.IP, error) {
		lookups.Add(1)
		return dns(ctx, host)
	}
	tests := []struct{ url, code string }{
		{"http://127.0.0.1:9000/", ""},
		{"http://127.0.0.2/", CodeEndpointNotAllowed},
		{"http://10.200.0.1/", ""},
		{"http://[::ffff:10.0.0.1]/", ""},
		{"http://[fd12::5]/", ""},
		{"http://[fd13::5]/", CodeEndpointNotAllowed},
		{"http://169.254.169.254/", CodeEndpointNotAllowed},
		{"http://in-range.test/", ""},
		{"http://corp.internal/", ""}, // resolves into 10/8
		{"http://evilcorp.internal/", CodeEndpointNotAllowed},
		{"file:///etc/passwd", CodeInvalidEndpoint},
		{"http://u:p@agents.internal/", CodeInvalidEndpoint},
	}
	for _, tt := range tests {
		_, err := a.ValidateEndpoint(context.Background(), tt.url)
		if got := endpointCode(err); got != tt.code {
			t.Errorf("ValidateEndpoint(%q) = %v, want code %q", tt.url, err, tt.code)
		}
	}

	// Listed names are allowed whatever they resolve to, without a lookup.
	lookups.Store(0)
	for _, u := range []string{"http://agents.internal:8000/", "https://AGENTS.INTERNAL./x", "http://a.corp.internal/", "http://b.a.corp.internal/"} {
		if _, err := a.ValidateEndpoint(context.Background(), u); err != nil {
			t.Errorf("ValidateEndpoint(%q): %v", u, err)
		}
	}
	if n := lookups.Load(); n != 0 {
		t.Errorf("allowlisted names were looked up %d times", n)
	}
}

func TestValidateEndpointContextCancelled(t *testing.T) {
	t.Parallel()
	a := &Allowlist{LookupIP: func(ctx context.Context, _ string) ([]net.IP, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.ValidateEndpoint(ctx, "http://slow.test/"); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestIsPublic(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{
		"8.8.8.8": true, "1.1.1.1": true, "2606:4700::1111": true, "100.63.255.255": true,
		"172.15.255.255": true, "172.32.0.0": true, "192.169.0.1": true,
		"10.255.255.255": false, "100.127.255.255": false, "169.254.0.1": false,
		"fe80::abcd": false, "febf::1": false, "fd00:ec2::254": false, "::ffff:192.168.0.1": false,
		"ff05::2": false, "239.255.255.250": false, "198.18.0.1": false, "240.0.0.1": false,
		"192.0.0.170": false, "2002:7f00:1::": false, "64:ff9b:1::1": false,
	} {
		if got := isPublic(netip.MustParseAddr(s)); got != want {
			t.Errorf("isPublic(%s) = %v, want %v", s, got, want)
		}
	}
}

// The Control hook is the last check before connect(2): it sees the address
// actually dialled, whatever the name was.
func TestDialControlHook(t *testing.T) {
	t.Parallel()
	a := mustAllowlist(t, "10.0.0.0/8")
	ctx := context.Background()
	for addr, ok := range map[string]bool{
		"127.0.0.1:80": false, "[::1]:80": false, "169.254.169.254:80": false, "[::ffff:127.0.0.1]:80": false,
		"10.1.1.1:80": true, "8.8.8.8:443": true, "not-an-address": false,
	} {
		err := a.control(false)(ctx, "tcp", addr, nil)
		if (err == nil) != ok {
			t.Errorf("control(%s) = %v, want allowed=%v", addr, err, ok)
		}
		if err != nil && endpointCode(err) != CodeEndpointNotAllowed {
			t.Errorf("control(%s) error %v is not endpoint_not_allowed", addr, err)
		}
	}
	if err := a.control(true)(ctx, "tcp", "127.0.0.1:80", nil); err != nil {
		t.Errorf("allowlisted host refused at control: %v", err)
	}
}

func TestDialContext(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	dns := fakeDNS(map[string][]string{"agent.test": {"127.0.0.1"}, "named.internal": {"127.0.0.1"}})
	ctx := context.Background()

	closed := &Allowlist{LookupIP: dns}
	for _, addr := range []string{"127.0.0.1:" + port, "agent.test:" + port} {
		if c, err := closed.DialContext(ctx, "tcp", addr); endpointCode(err) != CodeEndpointNotAllowed {
			if c != nil {
				c.Close()
			}
			t.Errorf("dial %s without allowlist: %v", addr, err)
		}
	}
	open := mustAllowlist(t, "127.0.0.1/32,named.internal")
	open.LookupIP = dns
	for _, addr := range []string{"127.0.0.1:" + port, "named.internal:" + port} {
		c, err := open.DialContext(ctx, "tcp", addr)
		if err != nil {
			t.Errorf("dial %s with allowlist: %v", addr, err)
			continue
		}
		c.Close()
	}
	if _, err := open.DialContext(ctx, "tcp", "nx.test:"+port); err == nil || endpointCode(err) != "" {
		t.Errorf("dial unknown name: %v", err)
	}
	if _, err := open.DialContext(ctx, "tcp6", "127.0.0.1:"+port); err == nil || !strings.Contains(err.Error(), "no suitable address") {
		t.Errorf("dial tcp6 to an IPv4 address: %v", err)
	}
}
