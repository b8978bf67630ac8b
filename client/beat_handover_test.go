package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
)

// beatOrder passes every request on, but holds the first heartbeat of ttl
// hold (the request, or with answer its answer, the server having taken
// it) until a heartbeat of ttl after, sent while it is held, has been
// answered, or for a second at most.
type beatOrder struct {
	hold, after string
	answer      bool
	held        chan struct{} // closed when the heartbeat is held
	released    chan struct{} // closed when a heartbeat of ttl after is answered
	holdOnce    sync.Once
	afterOnce   sync.Once
}

func newBeatOrder(hold, after time.Duration, answer bool) *beatOrder {
	return &beatOrder{hold: `"` + hold.String() + `"`, after: `"` + after.String() + `"`, answer: answer,
		held: make(chan struct{}), released: make(chan struct{})}
}

func (b *beatOrder) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/api/heartbeat" || r.Body == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	first := false
	if bytes.Contains(body, []byte(b.hold)) {
		b.holdOnce.Do(func() { first = true })
	}
	wait := func() {
		close(b.held)
		select {
		case <-b.released:
		case <-time.After(time.Second):
		}
	}
	if first && !b.answer {
		wait()
	}
	resp, err := http.DefaultTransport.RoundTrip(r)
	if first && b.answer {
		wait()
	}
	select {
	case <-b.held:
		if !first && bytes.Contains(body, []byte(b.after)) {
			b.afterOnce.Do(func() { close(b.released) })
		}
	default: // a heartbeat before the held one releases nothing
	}
	return resp, err
}

// blockAll is a sleeper whose every wait lasts until ctx is done: no
// periodic heartbeat or renewal comes.
func blockAll(ctx context.Context, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

// The long heartbeat the last WorkOn sends as it returns must not land
// after the first heartbeat of a WorkOn started meanwhile: the agent would
// then count as alive for an hour, not 90 s, while it works, and a process
// that died at once would keep its lease that long.
func TestAgainstServerLastLongHeartbeatNeverLandsAfterANewLoopsFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC))
	_, admin := startServer(t, clock.Now)
	rt := newBeatOrder(lastBeatTTL, defaultHeartbeatTTL, false)
	a := agent(t, admin, "agent-a", "researcher", WithClock(clock.Now), WithSleeper(blockAll),
		WithHTTPClient(&http.Client{Transport: rt}))
	b := agent(t, admin, "agent-b", "writer", WithClock(clock.Now))
	for _, id := range []string{"first", "second"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- a.WorkOn(ctx, "first", func(context.Context, *Lease) error { return nil })
	}()
	<-rt.held // the first WorkOn's last, long heartbeat is on its way
	working := make(chan struct{})
	finish := make(chan struct{})
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- a.WorkOn(ctx, "second", func(context.Context, *Lease) error {
			close(working)
			<-finish
			return nil
		})
	}()
	<-working
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	_, err := b.Checkout(ctx, "second", CheckoutRequest{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("another agent's checkout of the task the agent works on: %v, want a conflict", err)
	}
	if want := clock.Now().Add(defaultHeartbeatTTL); ce.HeartbeatExpiresAt == nil || ce.HeartbeatExpiresAt.After(want) {
		t.Errorf("the working agent's heartbeat expires at %v, want by %v (its loop's ttl, 90 s)", ce.HeartbeatExpiresAt, want)
	}
	close(finish)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
}

// Nor may it land after the first heartbeat of a call that started while
// the last one was still at work, its loop not yet started when the last
// one returned.
func TestAgainstServerLastLongHeartbeatWaitsForACallStarting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC))
	_, admin := startServer(t, clock.Now)
	// The starting call's first heartbeat (ttl 1 min) is taken by the
	// server, and its answer held until the long one is answered.
	rt := newBeatOrder(time.Minute, lastBeatTTL, true)
	a := agent(t, admin, "agent-a", "researcher", WithClock(clock.Now), WithSleeper(blockAll),
		WithHTTPClient(&http.Client{Transport: rt}))
	b := agent(t, admin, "agent-b", "writer", WithClock(clock.Now))
	for _, id := range []string{"first", "second"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	firstWorking, firstFinish := make(chan struct{}), make(chan struct{})
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- a.WorkOn(ctx, "first", func(context.Context, *Lease) error {
			close(firstWorking)
			<-firstFinish
			return nil
		})
	}()
	<-firstWorking
	secondWorking, secondFinish := make(chan struct{}), make(chan struct{})
	secondDone := make(chan error, 1)
	go func() {
		secondDone <- a.WorkOn(ctx, "second", func(context.Context, *Lease) error {
			close(secondWorking)
			<-secondFinish
			return nil
		}, HeartbeatTTL(time.Minute))
	}()
	<-rt.held // the second call's first heartbeat has been taken
	close(firstFinish)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	<-secondWorking
	_, err := b.Checkout(ctx, "second", CheckoutRequest{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("another agent's checkout of the task the agent works on: %v, want a conflict", err)
	}
	if want := clock.Now().Add(defaultHeartbeatTTL); ce.HeartbeatExpiresAt == nil || ce.HeartbeatExpiresAt.After(want) {
		t.Errorf("the working agent's heartbeat expires at %v, want by %v (its loops' ttls)", ce.HeartbeatExpiresAt, want)
	}
	close(secondFinish)
	if err := <-secondDone; err != nil {
		t.Fatal(err)
	}
}
