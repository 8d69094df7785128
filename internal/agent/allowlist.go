package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Allowlist names the hosts and networks that agents and HTTP tools may live
// on besides the public internet (AGENTPLANE_ENDPOINT_ALLOWLIST). A nil
// *Allowlist allows public addresses only.
//
// An IP address is allowed when it is public or inside a listed CIDR. A
// hostname is allowed when it is listed (exactly, or under a listed ".suffix")
// whatever it resolves to; otherwise every address it resolves to must be
// allowed. The rule is checked when an endpoint is registered
// (ValidateEndpoint) and again on the address actually dialled (DialContext),
// so a name that later resolves somewhere private (DNS rebinding) is refused.
type Allowlist struct {
	prefixes []netip.Prefix
	hosts    map[string]bool
	suffixes []string // each begins with "."

	// LookupIP resolves a hostname. Nil means net.DefaultResolver. Tests set
	// it to point names at chosen addresses without touching DNS.
	LookupIP func(ctx context.Context, host string) ([]net.IP, error)
}

// ParseAllowlist parses a comma-separated list of entries: a CIDR
// ("10.0.0.0/8"), a bare IP (one address), a hostname ("agents.internal",
// matched exactly) or a domain suffix (".agents.internal" or
// "*.agents.internal", matching every name under it but not the name itself).
// Blank entries are skipped; an empty string allows public addresses only.
func ParseAllowlist(s string) (*Allowlist, error) {
	a := &Allowlist{hosts: map[string]bool{}}
	for _, raw := range strings.Split(s, ",") {
		e := strings.TrimSpace(raw)
		if e == "" {
			continue
		}
		if strings.Contains(e, "/") {
			p, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("allowlist entry %q: %w", e, err)
			}
			a.prefixes = append(a.prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			if ip.Zone() != "" {
				return nil, fmt.Errorf("allowlist entry %q: zoned addresses are not supported", e)
			}
			a.prefixes = append(a.prefixes, netip.PrefixFrom(ip, ip.BitLen()))
			continue
		}
		suffix := false
		name := e
		if rest, ok := strings.CutPrefix(name, "*."); ok {
			name, suffix = rest, true
		} else if rest, ok := strings.CutPrefix(name, "."); ok {
			name, suffix = rest, true
		}
		name = normalizeHost(name)
		if !validHostname(name) {
			return nil, fmt.Errorf("allowlist entry %q: not a CIDR, IP address or hostname", e)
		}
		if suffix {
			a.suffixes = append(a.suffixes, "."+name)
		} else {
			a.hosts[name] = true
		}
	}
	return a, nil
}

// ValidateEndpoint checks an agent or tool endpoint at registration: it must
// be an absolute http or https URL with a host and no userinfo or fragment
// (else CodeInvalidEndpoint), and its host must be allowed (else
// CodeEndpointNotAllowed). A hostname that is not allowlisted is resolved and
// every address must pass. The error is an *EndpointError, or the context's
// error if ctx ends during the lookup.
func (a *Allowlist) ValidateEndpoint(ctx context.Context, raw string) (*url.URL, error) {
	u, err := parseEndpoint(raw)
	if err != nil {
		return nil, err
	}
	host := u.Hostname()
	if ip, err := netip.ParseAddr(host); err == nil {
		if !a.addrAllowed(ip) {
			return nil, notAllowed("address %s is not public and not on the allowlist", ip)
		}
		return u, nil
	}
	if a.hostAllowed(host) {
		return u, nil
	}
	ips, err := a.lookup(ctx, host)
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("validate endpoint: %w", ctx.Err())
		}
		return nil, invalidEndpoint(err, "cannot resolve host %q", host)
	}
	if err := a.checkAddrs(host, ips); err != nil {
		return nil, err
	}
	return u, nil
}

// parseEndpoint does the syntactic half of ValidateEndpoint; Invoke and Probe
// use it too, so a stored endpoint that was never validated still cannot
// smuggle in another scheme or credentials.
func parseEndpoint(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, invalidEndpoint(err, "endpoint is not a URL")
	}
	switch {
	case !u.IsAbs() || u.Opaque != "":
		return nil, invalidEndpoint(nil, "endpoint must be an absolute http or https URL")
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, invalidEndpoint(nil, "endpoint scheme %q is not http or https", u.Scheme)
	case u.User != nil:
		return nil, invalidEndpoint(nil, "endpoint must not carry userinfo")
	case strings.Contains(raw, "#"):
		return nil, invalidEndpoint(nil, "endpoint must not have a fragment")
	case u.Hostname() == "":
		return nil, invalidEndpoint(nil, "endpoint has no host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, invalidEndpoint(err, "endpoint port %q is out of range", p)
		}
	}
	return u, nil
}

// checkAddrs refuses the whole host if any one address is refused: which
// address a client ends up using is not ours to choose.
func (a *Allowlist) checkAddrs(host string, ips []netip.Addr) error {
	if len(ips) == 0 {
		return invalidEndpoint(nil, "host %q resolves to no address", host)
	}
	for _, ip := range ips {
		if !a.addrAllowed(ip) {
			return notAllowed("host %q resolves to %s, which is not public and not on the allowlist", host, ip)
		}
	}
	return nil
}

func (a *Allowlist) lookup(ctx context.Context, host string) ([]netip.Addr, error) {
	if a == nil || a.LookupIP == nil {
		return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	}
	raw, err := a.LookupIP(ctx, host)
	if err != nil {
		return nil, err
	}
	ips := make([]netip.Addr, 0, len(raw))
	for _, r := range raw {
		if ip, ok := netip.AddrFromSlice(r); ok {
			ips = append(ips, ip)
		}
	}
	return ips, nil
}

// hostAllowed reports whether a hostname (not an IP) is listed.
func (a *Allowlist) hostAllowed(host string) bool {
	if a == nil {
		return false
	}
	h := normalizeHost(host)
	if h == "" {
		return false
	}
	if a.hosts[h] {
		return true
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// addrAllowed reports whether an address may be dialled.
func (a *Allowlist) addrAllowed(ip netip.Addr) bool {
	ip = ip.WithZone("")
	if a != nil {
		for _, p := range a.prefixes {
			if p.Contains(ip) || p.Contains(ip.Unmap()) {
				return true
			}
		}
	}
	return isPublic(ip)
}

func normalizeHost(h string) string {
	return strings.TrimSuffix(strings.ToLower(h), ".")
}

// validHostname accepts LDH labels (plus "_", seen in real internal names).
func validHostname(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range []byte(label) {
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_'
			if !ok {
				return false
			}
		}
	}
	return true
}

// refused lists the networks an endpoint may not use unless allowlisted: each
// one reaches the platform's own host, its private network or cloud metadata
// services rather than the public internet.
var refused = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network"; 0.0.0.0 reaches localhost on Linux
		"10.0.0.0/8",     // private
		"100.64.0.0/10",  // carrier-grade NAT (Alibaba metadata is 100.100.100.200)
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata 169.254.169.254
		"172.16.0.0/12",  // private
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // private
		"198.18.0.0/15",  // benchmarking, used inside some clouds
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, includes broadcast 255.255.255.255
		"::/128",         // unspecified
		"::1/128",        // loopback
		"64:ff9b:1::/48", // local-use NAT64
		"100::/64",       // discard
		"fc00::/7",       // unique local, includes AWS metadata fd00:ec2::254
		"fe80::/10",      // link-local
		"fec0::/10",      // deprecated site-local
		"ff00::/8",       // multicast
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	v4compat  = netip.MustParsePrefix("::/96")
)

// isPublic reports whether ip is outside every refused network. IPv6 forms
// that carry an IPv4 address (mapped, compatible, NAT64, 6to4) are judged by
// that IPv4 address, since that is where the packets end up.
func isPublic(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip), v4compat.Contains(ip) && !ip.IsUnspecified() && !ip.IsLoopback():
			return isPublic(netip.AddrFrom4([4]byte(b[12:16])))
		case sixToFour.Contains(ip):
			return isPublic(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	for _, p := range refused {
		if p.Contains(ip) {
			return false
		}
	}
	return ip.IsValid()
}
