package faults_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/faults"
)

// echoServer answers each connection with "re:" + everything it read, once
// the client has half-closed, and reports what it read.
func echoServer(t *testing.T) (addr string, got chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan []byte, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				got <- b
				_, _ = c.Write(append([]byte("re:"), b...))
			}()
		}
	}()
	return ln.Addr().String(), got
}

func roundTrip(t *testing.T, addr string, msg []byte) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	_, _ = c.Write(msg)
	_ = c.(*net.TCPConn).CloseWrite()
	b, _ := io.ReadAll(c)
	return b
}

func TestProxyFaults(t *testing.T) {
	addr, got := echoServer(t)
	p, err := faults.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msg := []byte("0123456789abcdefghij")
	serverRead := func() []byte {
		select {
		case b := <-got:
			return b
		case <-time.After(3 * time.Second):
			return nil
		}
	}

	if b := roundTrip(t, p.Addr(), msg); !bytes.Equal(b, append([]byte("re:"), msg...)) {
		t.Fatalf("pass: got %q", b)
	}
	serverRead()

	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Kind: faults.Refuse} })
	if b := roundTrip(t, p.Addr(), msg); len(b) != 0 {
		t.Fatalf("refuse: got %q", b)
	}

	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Kind: faults.CutRequest, Bytes: 7} })
	if b := roundTrip(t, p.Addr(), msg); len(b) != 0 {
		t.Fatalf("cut request: client got %q", b)
	}
	if b := serverRead(); string(b) != "0123456" {
		t.Fatalf("cut request: server read %q, want the first 7 bytes", b)
	}

	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Kind: faults.CutResponse, Bytes: 5} })
	if b := roundTrip(t, p.Addr(), msg); string(b) != "re:01" {
		t.Fatalf("cut response: client got %q, want 5 bytes", b)
	}
	if b := serverRead(); !bytes.Equal(b, msg) {
		t.Fatalf("cut response: server read %q, want the whole request", b)
	}

	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Delay: 200 * time.Millisecond} })
	t0 := time.Now()
	if b := roundTrip(t, p.Addr(), msg); !bytes.Equal(b, append([]byte("re:"), msg...)) {
		t.Fatalf("delay: got %q", b)
	}
	if d := time.Since(t0); d < 200*time.Millisecond {
		t.Fatalf("delay: answered after %v", d)
	}
	serverRead()

	p.SetPolicy(func(int64) faults.Fault { return faults.Fault{Kind: faults.Blackhole} })
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write(msg)
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	var one [1]byte
	if _, err := c.Read(one[:]); err == nil {
		t.Fatal("blackhole answered")
	} else if ne := net.Error(nil); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("blackhole: %v, want a timeout", err)
	}
	c.Close()

	for k, want := range map[faults.Kind]int64{faults.Pass: 2, faults.Refuse: 1, faults.CutRequest: 1, faults.CutResponse: 1, faults.Blackhole: 1} {
		if n := p.Count(k); n != want {
			t.Errorf("%v: %d connections, want %d", k, n, want)
		}
	}
}

func TestRandomPolicy(t *testing.T) {
	pol := faults.Random(1, []faults.Kind{faults.Refuse, faults.CutResponse}, []float64{0.25, 0.25}, 0, 100)
	n := map[faults.Kind]int{}
	for i := range 4000 {
		f := pol(int64(i))
		n[f.Kind]++
		if f.Kind == faults.CutResponse && (f.Bytes < 1 || f.Bytes > 100) {
			t.Fatalf("cut at %d bytes", f.Bytes)
		}
	}
	for _, k := range []faults.Kind{faults.Pass, faults.Refuse, faults.CutResponse} {
		if n[k] < 800 {
			t.Errorf("%v drawn %d times of 4000: %v", k, n[k], n)
		}
	}
}
