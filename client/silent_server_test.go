package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// silentServer accepts connections and never answers, as a hung server
// or proxy does; it counts the connections.
type silentServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newSilentServer(t *testing.T) *silentServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &silentServer{ln: ln}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, conn)
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, c := range s.conns {
			c.Close()
		}
	})
	return s
}

func (s *silentServer) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// A read of a server that accepts the connection and never answers was
// tried four times, each for the whole per-try timeout (30 s by
// default): two minutes without a word, then an error carrying Go's own
// text (`Get "http://...": context deadline exceeded (Client.Timeout
// exceeded while awaiting headers)`). A try that timed out is not tried
// again, and its error says it timed out in words of its own. A write
// that timed out stays undecided.
func TestASilentServerIsAskedOnceAndItsTimeoutWorded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, call := range map[string]func(c *Client) error{
		"list":     func(c *Client) error { _, err := c.ListCheckouts(ctx, ""); return err },
		"status":   func(c *Client) error { _, err := c.Status(ctx, "t1"); return err },
		"checkout": func(c *Client) error { _, err := c.Checkout(ctx, "t1", CheckoutRequest{}); return err },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := newSilentServer(t)
			c := New("http://"+s.ln.Addr().String(), "ck_x", WithHTTPClient(&http.Client{Timeout: 100 * time.Millisecond}), WithSleeper((&instant{}).sleep))
			err := call(c)
			var ue *UnreachableError
			if !errors.As(err, &ue) || !ue.Sent || !errors.Is(err, ErrUndecided) {
				t.Fatalf("%v (%T), want an *UnreachableError that was sent", err, err)
			}
			if n := s.accepted(); n != 1 {
				t.Errorf("%d connections, want 1: a try that timed out is not tried again", n)
			}
			msg := ue.Error()
			if strings.Contains(msg, `"http://`) || strings.Contains(msg, "Client.Timeout") || strings.Contains(msg, "deadline") || !strings.HasSuffix(msg, ": timed out") {
				t.Errorf("message %q, want it to end in timed out, without Go's text", msg)
			}
		})
	}
}
