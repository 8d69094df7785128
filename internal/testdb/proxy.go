package testdb

import (
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy is a TCP forwarder to a database server that a test can cut, to
// see what agentplane does when its database becomes unreachable without
// touching the server other tests share.
type Proxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	wg    sync.WaitGroup

	turns atomic.Int64 // see ClientTurns
}

// ClientTurns counts, over all connections, the times a client sent
// something after the server last answered it (or first): the round trips
// the clients began.
func (p *Proxy) ClientTurns() int64 { return p.turns.Load() }

// NewProxy forwards a loopback port to target (host:port) until the test
// ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// PostgresProxy returns a proxy to the PostgreSQL server of dsn and dsn
// rewritten to go through it.
func PostgresProxy(t testing.TB, dsn string) (*Proxy, string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse %s: %v", dsn, err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "5432")
	}
	p := NewProxy(t, host)
	u.Host = p.ln.Addr().String()
	return p, u.String()
}

// Cut drops every open connection and refuses new ones (they are closed at
// once) until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) close() {
	p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c], p.conns[up] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		clientSpoke := new(atomic.Bool)
		go p.pipe(up, c, func() {
			if !clientSpoke.Swap(true) {
				p.turns.Add(1)
			}
		})
		go p.pipe(c, up, func() { clientSpoke.Store(false) })
	}
}

// pipe copies src to dst, calling read on each chunk it reads.
func (p *Proxy) pipe(dst, src net.Conn, read func()) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			read()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}
