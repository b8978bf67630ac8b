// Package faults is a TCP proxy that injects network faults between a client
// and a server: it delays, refuses, blackholes, and cuts connections in the
// middle of a request or of a response. Tests put it between the lease store's
// DynamoDB client and dynalite to show which guarantees survive a bad
// network.
//
// A fault is chosen per connection by a Policy. With keep-alives off on the
// client (see NoKeepAlive), a connection carries exactly one request, so a
// fault hits one request, and the SDK's retry of it gets a fresh roll.
package faults

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what happens to one connection.
type Kind int

const (
	// Pass forwards the connection untouched (after Delay, if set).
	Pass Kind = iota
	// Refuse closes the connection before forwarding a byte: the request
	// never reaches the server.
	Refuse
	// CutRequest forwards the first Bytes of the request, then closes both
	// sides: the server sees a truncated request and answers nothing.
	CutRequest
	// CutResponse forwards the whole request, and the first Bytes of the
	// server's answer, then closes both sides: the server has acted, and the
	// client never learns the outcome.
	CutResponse
	// Blackhole reads the request and never answers, until the client gives
	// up or the proxy closes.
	Blackhole
)

func (k Kind) String() string {
	switch k {
	case Pass:
		return "pass"
	case Refuse:
		return "refuse"
	case CutRequest:
		return "cut-request"
	case CutResponse:
		return "cut-response"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Fault is the treatment of one connection.
type Fault struct {
	Kind  Kind
	Bytes int           // for CutRequest and CutResponse
	Delay time.Duration // before anything is forwarded
}

// Policy picks the fault of the n-th connection (from 0).
type Policy func(n int64) Fault

// None passes every connection.
func None(int64) Fault { return Fault{} }

// Random returns a policy that gives each connection fault f with
// probability p[i] of kinds[i], and otherwise passes it after a delay of up
// to maxDelay. Cut points are drawn below cutMax bytes. It is safe for
// concurrent use.
func Random(seed uint64, kinds []Kind, p []float64, maxDelay time.Duration, cutMax int) Policy {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return func(int64) Fault {
		mu.Lock()
		defer mu.Unlock()
		x := r.Float64()
		var f Fault
		for i, k := range kinds {
			if x < p[i] {
				f.Kind = k
				break
			}
			x -= p[i]
		}
		if f.Kind == CutRequest || f.Kind == CutResponse {
			f.Bytes = 1 + r.IntN(max(cutMax, 1))
		}
		if maxDelay > 0 && r.IntN(4) == 0 {
			f.Delay = time.Duration(r.Int64N(int64(maxDelay)))
		}
		return f
	}
}

// Proxy forwards TCP connections from its own address to a target address.
type Proxy struct {
	ln     net.Listener
	target string

	policy atomic.Pointer[Policy]
	conns  atomic.Int64
	counts [5]atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Listen starts a proxy on 127.0.0.1 (a free port) in front of target
// ("host:port"). It passes everything until SetPolicy is called.
func Listen(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, open: map[net.Conn]struct{}{}}
	p.SetPolicy(None)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's "host:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// URL is the proxy as an http:// endpoint.
func (p *Proxy) URL() string { return "http://" + p.Addr() }

// SetPolicy changes the policy for new connections.
func (p *Proxy) SetPolicy(pol Policy) { p.policy.Store(&pol) }

// Count reports how many connections got each kind of fault.
func (p *Proxy) Count(k Kind) int64 { return p.counts[k].Load() }

// Connections is the number of connections accepted.
func (p *Proxy) Connections() int64 { return p.conns.Load() }

// CutAll closes every open connection at once, in whatever state it is.
func (p *Proxy) CutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.open {
		_ = c.Close()
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.CutAll()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.open[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.open, c)
	_ = c.Close()
}

func (p *Proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		n := p.conns.Add(1) - 1
		f := (*p.policy.Load())(n)
		p.counts[f.Kind].Add(1)
		if !p.track(c) {
			continue
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.handle(c, f)
		}()
	}
}

func (p *Proxy) handle(client net.Conn, f Fault) {
	defer p.untrack(client)
	if f.Delay > 0 {
		time.Sleep(f.Delay)
	}
	switch f.Kind {
	case Refuse:
		return
	case Blackhole:
		_, _ = io.Copy(io.Discard, client)
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)

	up := io.Reader(client)
	if f.Kind == CutRequest {
		up = io.LimitReader(client, int64(f.Bytes))
	}
	down := io.Reader(server)
	if f.Kind == CutResponse {
		down = io.LimitReader(server, int64(f.Bytes))
	}
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(server, up)
		if f.Kind == CutRequest {
			// Give the server the truncated request, then hang up on both.
			_ = client.Close()
			_ = server.Close()
		} else if tc, ok := server.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, down)
		// The answer is complete, or cut: either way the connection ends.
		_ = client.Close()
		_ = server.Close()
		done <- struct{}{}
	}()
	<-done
	<-done
}
