package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
	"github.com/checkout-dev/checkout/lease"
)

// memDeadLetters keeps dead letters in memory, in order.
type memDeadLetters struct {
	mu   sync.Mutex
	list []webhook.DeadLetter
}

func (m *memDeadLetters) Put(_ context.Context, d webhook.DeadLetter) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.list = append(m.list, d)
	return nil
}

func (m *memDeadLetters) all() []webhook.DeadLetter {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]webhook.DeadLetter(nil), m.list...)
}

// published records the notices told to it, as the EventBridge notifier
// that runs before the webhooks in the notices function.
type published struct {
	mu  sync.Mutex
	ids []string
}

func (p *published) Notify(_ context.Context, n lease.Notice) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ids = append(p.ids, n.ID)
	return nil
}

func (p *published) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ids)
}

// hanging is a receiver that accepts connections and never answers, as a
// blackholed or overloaded host does. It counts the requests it gets.
func hanging(t *testing.T) (url string, requests func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// probeInterval is the tests' ProbeInterval, on an injected clock. The
// clock also signs, and webhooktest's receiver accepts a signature up to a
// minute from the real time: the tests move it a few intervals at most.
const probeInterval = 10 * time.Second

func breakerNotifier(t *testing.T, url string, dl webhook.DeadLetters, clock *testclock.Clock, tweak func(*webhook.Config)) *webhook.Notifier {
	t.Helper()
	return newNotifier(t, []string{url}, "s", dl, func(c *webhook.Config) {
		c.Now = clock.Now
		c.ProbeInterval = probeInterval
		c.MaxElapsed = 300 * time.Millisecond
		c.AttemptTimeout = 100 * time.Millisecond
		if tweak != nil {
			tweak(c)
		}
	})
}

// A receiver that hangs costs a batch the first delivery's retries and no
// more: every later notice is dead-lettered untried while the URL is down,
// so N notices take a time that does not grow with N, and the notifier
// told before the webhooks (EventBridge, in the notices function) gets
// each of them within that time. Before the circuit breaker every later
// notice still waited out one attempt, so a batch of a hundred changes to
// a receiver that hung outlasted the notices function's timeout.
func TestHangingReceiverHoldsUpABatchForABoundedTimeWhateverItsSize(t *testing.T) {
	t.Parallel()
	url, requests := hanging(t)
	dl := &memDeadLetters{}
	clock := testclock.New(time.Now())
	hooks := breakerNotifier(t, url, dl, clock, nil)
	bus := &published{}
	n := webhook.Multi(bus, hooks)

	const notices = 40 // 4 s at one 100 ms attempt each
	bound := 300*time.Millisecond + 100*time.Millisecond + time.Second
	start := time.Now()
	for i := range notices {
		if err := n.Notify(context.Background(), notice("t", int64(i+1))); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > bound {
			t.Fatalf("%d notices took %v, past %v: the receiver holds up every notice", i+1, took, bound)
		}
	}
	if bus.count() != notices {
		t.Fatalf("%d notices published beside the webhook, want %d", bus.count(), notices)
	}
	dead := dl.all()
	if len(dead) != notices {
		t.Fatalf("%d dead letters, want %d", len(dead), notices)
	}
	if dead[0].Attempts < 2 || dead[0].Attempts != requests() {
		t.Errorf("first notice: %d attempts, receiver saw %d requests; want its retries", dead[0].Attempts, requests())
	}
	for _, d := range dead[1:] {
		if d.Attempts != 0 || !strings.Contains(d.Error, "not tried") || !strings.Contains(d.Error, "down since") {
			t.Fatalf("a notice after the URL went down: %d attempts, error %q; want it dead-lettered untried", d.Attempts, d.Error)
		}
	}
}

// While a URL is down it is tried again once per ProbeInterval: by one
// delivery, however many run at once; the others, and those between
// probes, are dead-lettered untried.
func TestDownURLIsProbedAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("s")
	defer r.Close()
	r.FailFor(time.Hour, 502, 0)
	dl := &memDeadLetters{}
	clock := testclock.New(time.Now())
	n := breakerNotifier(t, r.URL, dl, clock, func(c *webhook.Config) { c.MaxElapsed = 50 * time.Millisecond })

	var seq atomic.Int64
	notify := func() {
		if err := n.Notify(context.Background(), notice("t", seq.Add(1))); err != nil {
			t.Error(err)
		}
	}
	notify() // uses up its retries: the URL is down
	down := r.Attempts()
	if down < 2 {
		t.Fatalf("%d attempts in the retry window", down)
	}
	for range 5 {
		notify()
	}
	clock.Advance(probeInterval - time.Millisecond)
	notify()
	if got := r.Attempts() - down; got != 0 {
		t.Fatalf("%d attempts within the probe interval, want none", got)
	}

	clock.Advance(time.Millisecond)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(notify)
	}
	wg.Wait()
	if got := r.Attempts() - down; got != 1 {
		t.Fatalf("%d attempts by 10 deliveries once the interval was up, want one probe", got)
	}
	notify()
	if got := r.Attempts() - down; got != 1 {
		t.Fatalf("%d attempts after a failed probe, want none until the next interval", got)
	}
	clock.Advance(probeInterval)
	notify()
	notify()
	if got := r.Attempts() - down; got != 2 {
		t.Fatalf("%d attempts after a second interval, want a second probe", got)
	}

	probes := 0
	for _, d := range dl.all()[1:] {
		switch d.Attempts {
		case 0:
			if !strings.Contains(d.Error, "not tried") {
				t.Errorf("untried dead letter %s: error %q", d.EventID, d.Error)
			}
		case 1:
			probes++
			if !strings.Contains(d.Error, "502") {
				t.Errorf("probe's dead letter %s: error %q", d.EventID, d.Error)
			}
		default:
			t.Errorf("dead letter %s: %d attempts while down", d.EventID, d.Attempts)
		}
	}
	if probes != 2 || int64(len(dl.all())) != seq.Load() {
		t.Errorf("%d probes among %d dead letters of %d notices", probes, len(dl.all()), seq.Load())
	}
	if len(r.Delivered()) != 0 {
		t.Errorf("delivered %v by a receiver that fails", r.Delivered())
	}
}

// A receiver that comes back gets the next probe, and from then on every
// notice, with retries again.
func TestReceiverThatComesBackIsDeliveredToAgain(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("s")
	defer r.Close()
	dl := &memDeadLetters{}
	clock := testclock.New(time.Now())
	// A receiver that answers at once: an attempt cut short by a loaded
	// machine's scheduling would be sent again, and delivered twice.
	n := breakerNotifier(t, r.URL, dl, clock, func(c *webhook.Config) {
		c.AttemptTimeout = 5 * time.Second
	})
	ctx := context.Background()

	r.FailFor(time.Hour, 503, 0)
	if err := n.Notify(ctx, notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	r.FailFor(0, 0, 0) // back, but not yet probed
	if err := n.Notify(ctx, notice("b", 2)); err != nil {
		t.Fatal(err)
	}
	if len(r.Delivered()) != 0 {
		t.Fatalf("delivered %v before the probe was due", r.Delivered())
	}
	clock.Advance(probeInterval)
	for i, id := range []string{"c", "d", "e"} {
		if i == 2 {
			r.FailNext(2, 500) // retried again, as for any URL that is up
		}
		if err := n.Notify(ctx, notice(id, int64(3+i))); err != nil {
			t.Fatal(err)
		}
	}
	got := r.Delivered()
	if len(got) != 3 || got["c:3:TaskAvailable"] != 1 || got["d:4:TaskAvailable"] != 1 || got["e:5:TaskAvailable"] != 1 {
		t.Fatalf("after the receiver came back: delivered %v", got)
	}
	if dead := dl.all(); len(dead) != 2 || dead[0].EventID != "a:1:TaskAvailable" || dead[1].EventID != "b:2:TaskAvailable" || dead[1].Attempts != 0 {
		t.Fatalf("dead letters %+v", dead)
	}
}

// A delivery never runs into the last DeadlineMargin of its context's
// deadline (a Lambda invocation's): what cannot be tried in the time left
// is dead-lettered untried, and the notices published beside the webhooks
// all go out, before the deadline. The receiver here is slow but never
// fails, so the circuit breaker does not help: only the deadline does.
func TestDeliveriesEndBeforeTheContextDeadline(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(80 * time.Millisecond):
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	dl := &memDeadLetters{}
	const margin = 300 * time.Millisecond
	hooks := breakerNotifier(t, srv.URL, dl, testclock.New(time.Now()), func(c *webhook.Config) {
		c.DeadlineMargin = margin
		c.AttemptTimeout = time.Second
		c.MaxElapsed = 10 * time.Second
	})
	bus := &published{}
	n := webhook.Multi(bus, hooks)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	const notices = 30 // 2.4 s at 80 ms each
	for i := range notices {
		if err := n.Notify(ctx, notice("t", int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if left := time.Until(deadline); left < margin/2 {
		t.Fatalf("the notices ended %v before the deadline, want about the margin (%v)", left, margin)
	}
	if bus.count() != notices {
		t.Fatalf("%d notices published beside the webhook, want %d", bus.count(), notices)
	}
	dead := dl.all()
	if len(dead) < notices/2 || len(dead) == notices {
		t.Fatalf("%d of %d notices dead-lettered", len(dead), notices)
	}
	for _, d := range dead {
		if !strings.Contains(d.Error, "no time left") {
			t.Errorf("dead letter %s: %q, want no time left", d.EventID, d.Error)
		}
	}

	// Running out of time is not the receiver's fault: it is not marked
	// down, so the next invocation delivers at once.
	if err := n.Notify(context.Background(), notice("u", 1)); err != nil {
		t.Fatal(err)
	}
	if len(dl.all()) != len(dead) {
		t.Fatalf("a notice after the deadline's invocation was dead-lettered: %+v", dl.all()[len(dead):])
	}
}

// A receiver that hangs, in an invocation shorter than the retry window:
// the first notice's retries stop at the margin, and the invocation ends
// on time, with every notice dead-lettered.
func TestHangingReceiverRetriesStopAtTheDeadline(t *testing.T) {
	t.Parallel()
	url, _ := hanging(t)
	dl := &memDeadLetters{}
	hooks := breakerNotifier(t, url, dl, testclock.New(time.Now()), func(c *webhook.Config) {
		c.DeadlineMargin = 200 * time.Millisecond
		c.MaxElapsed = 10 * time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	for i := range 5 {
		if err := hooks.Notify(ctx, notice("t", int64(i+1))); err != nil {
			t.Fatal(err)
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the notices ran past the deadline")
	}
	dead := dl.all()
	if len(dead) != 5 || dead[0].Attempts < 2 || !strings.Contains(dead[0].Error, "no time left") {
		t.Fatalf("dead letters %+v", dead)
	}
}

// failingDeadLetters cannot write a dead letter, as a store that is down.
type failingDeadLetters struct{}

func (failingDeadLetters) Put(context.Context, webhook.DeadLetter) error {
	return errors.New("store down")
}

// A notice to a URL that is down that cannot be dead-lettered either fails,
// so that its caller hands it again; since it holds the notices after it
// up anyway, it is tried once each time, and a receiver that is back takes
// it without waiting for the probe.
func TestNoticeThatCannotBeDeadLetteredIsTriedEachTime(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("s")
	defer r.Close()
	clock := testclock.New(time.Now())
	n := breakerNotifier(t, r.URL, failingDeadLetters{}, clock, func(c *webhook.Config) { c.MaxElapsed = 50 * time.Millisecond })
	r.FailFor(time.Hour, 500, 0)
	if err := n.Notify(context.Background(), notice("a", 1)); err == nil || !strings.Contains(err.Error(), "store down") {
		t.Fatalf("first delivery: %v", err)
	}
	down := r.Attempts()
	if err := n.Notify(context.Background(), notice("a", 1)); err == nil || r.Attempts() != down+1 {
		t.Fatalf("handed again while down: %v, %d attempts; want an error after one attempt", err, r.Attempts()-down)
	}
	r.FailFor(0, 0, 0)
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil || r.Delivered()["a:1:TaskAvailable"] != 1 {
		t.Fatalf("handed again once the receiver is back: %v, delivered %v", err, r.Delivered())
	}
	if err := n.Notify(context.Background(), notice("b", 2)); err != nil || r.Delivered()["b:2:TaskAvailable"] != 1 {
		t.Fatalf("the next notice: %v, delivered %v; want the URL up again", err, r.Delivered())
	}
}
