package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
	"github.com/checkout-dev/checkout/lease"
)

var at = time.Date(2026, 3, 20, 14, 35, 0, 123_000_000, time.UTC)

func notice(task string, seq int64) lease.Notice {
	held := 90 * time.Second
	e := lease.Event{Seq: seq, Type: lease.EventTimeout, TaskID: task, AgentID: "agent-a1b2", RunID: "run-7f3c", Fence: 12, At: at, Held: &held, By: lease.BySystem}
	return lease.Notice{ID: task + ":" + itoa(seq) + ":" + lease.NoticeTaskAvailable, Kind: lease.NoticeTaskAvailable, Event: e}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func newNotifier(t *testing.T, urls []string, secret string, dl webhook.DeadLetters, tweak func(*webhook.Config)) *webhook.Notifier {
	t.Helper()
	cfg := webhook.Config{URLs: urls, Secret: secret, DeadLetters: dl, InitialBackoff: 10 * time.Millisecond, MaxBackoff: 50 * time.Millisecond, MaxElapsed: 2 * time.Second, AttemptTimeout: time.Second}
	if tweak != nil {
		tweak(&cfg)
	}
	n, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestBodyAndSignature(t *testing.T) {
	t.Parallel()
	body, err := webhook.Body(notice("task-d4e5", 3))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"task-d4e5:3:TaskAvailable","type":"TaskAvailable","event":{"type":"timeout","task_id":"task-d4e5","agent_id":"agent-a1b2","run_id":"run-7f3c","fence":12,"at":"2026-03-20T14:35:00.123Z","held_seconds":90,"by":"system","reason":""}}`
	if string(body) != want {
		t.Fatalf("body\n got %s\nwant %s", body, want)
	}
	// The HMAC-SHA256 of "1774017300.{}" under "whsec": checked by hand
	// with printf '1774017300.{}' | openssl dgst -sha256 -hmac whsec.
	got := webhook.Sign("whsec", time.Unix(1774017300, 0), []byte("{}"))
	if got != "t=1774017300,v1=269a8da0be73e33add65720838d1ff186995a255d7188ae9d2c62f7a5e4ee3e2" {
		t.Fatalf("signature %q", got)
	}
}

// Deliveries that fail with 5xx or time out are retried with the same
// event id until they succeed; each attempt is signed afresh.
func TestRetriesUntilDelivered(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("s3cret")
	defer r.Close()
	dl := &webhook.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
	n := newNotifier(t, []string{r.URL}, "s3cret", dl, func(c *webhook.Config) { c.AttemptTimeout = 100 * time.Millisecond })

	r.FailNext(3, 500)
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	r.FailFor(250*time.Millisecond, 503, time.Second) // every attempt times out meanwhile
	if err := n.Notify(context.Background(), notice("b", 2)); err != nil {
		t.Fatal(err)
	}
	r.FailNext(2, 429)
	if err := n.Notify(context.Background(), notice("c", 3)); err != nil {
		t.Fatal(err)
	}
	got := r.Delivered()
	if len(got) != 3 || got["a:1:TaskAvailable"] != 1 || got["b:2:TaskAvailable"] != 1 || got["c:3:TaskAvailable"] != 1 {
		t.Fatalf("delivered %v", got)
	}
	if a := r.Attempts(); a < 3+1+2+2+1 {
		t.Fatalf("%d attempts: the failures were not retried", a)
	}
	if r.Rejected() != 0 {
		t.Fatalf("%d deliveries failed verification", r.Rejected())
	}
	if dead, _ := webhook.ReadDeadLetters(dl.Path); len(dead) != 0 {
		t.Fatalf("dead letters %v", dead)
	}
}

// What still fails when the retry window ends goes to the dead-letter
// file, with its event id and body; while the URL stays down later notices
// go there untried, so the stream is not held up; when it answers a probe
// again, deliveries resume.
func TestDeadLetters(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("s3cret")
	defer r.Close()
	dl := &webhook.FileDeadLetters{Path: filepath.Join(t.TempDir(), "data", webhook.DeadLetterFile)}
	clock := testclock.New(time.Now())
	n := newNotifier(t, []string{r.URL}, "s3cret", dl, func(c *webhook.Config) { c.MaxElapsed = 200 * time.Millisecond; c.Now = clock.Now })

	r.FailFor(time.Hour, 502, 0)
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	first := r.Attempts()
	if first < 3 {
		t.Fatalf("%d attempts in the retry window", first)
	}
	start := time.Now()
	if err := n.Notify(context.Background(), notice("b", 2)); err != nil {
		t.Fatal(err)
	}
	if r.Attempts() != first || time.Since(start) > 150*time.Millisecond {
		t.Fatalf("a URL that is down: %d attempts in %v", r.Attempts()-first, time.Since(start))
	}
	r.FailFor(0, 0, 0)
	clock.Advance(webhook.DefaultProbeInterval)
	if err := n.Notify(context.Background(), notice("c", 3)); err != nil {
		t.Fatal(err)
	}
	r.FailNext(1, 500)
	if err := n.Notify(context.Background(), notice("d", 4)); err != nil {
		t.Fatal(err)
	}
	if got := r.Delivered(); len(got) != 2 || got["c:3:TaskAvailable"] != 1 || got["d:4:TaskAvailable"] != 1 {
		t.Fatalf("after recovery: delivered %v", got)
	}
	dead, err := webhook.ReadDeadLetters(dl.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].EventID != "a:1:TaskAvailable" || dead[1].EventID != "b:2:TaskAvailable" ||
		dead[0].URL != r.URL || dead[0].Attempts != first || !strings.Contains(dead[0].Error, "502") ||
		dead[1].Attempts != 0 || !strings.Contains(dead[1].Error, "502") ||
		!strings.Contains(string(dead[1].Body), `"id":"b:2:TaskAvailable"`) {
		t.Fatalf("dead letters %+v", dead)
	}
}

// A receiver that refuses a delivery (4xx other than 408 and 429; here: a
// receiver with another secret rejects the signature) is not retried.
func TestRefusedIsNotRetried(t *testing.T) {
	t.Parallel()
	r := webhooktest.New("the-real-secret")
	defer r.Close()
	dl := &webhook.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
	n := newNotifier(t, []string{r.URL}, "a-forger's-guess", dl, nil)
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	if r.Attempts() != 1 || r.Rejected() != 1 || len(r.Delivered()) != 0 {
		t.Fatalf("attempts %d rejected %d delivered %v", r.Attempts(), r.Rejected(), r.Delivered())
	}
	if dead, _ := webhook.ReadDeadLetters(dl.Path); len(dead) != 1 || !strings.Contains(dead[0].Error, "401") {
		t.Fatalf("dead letters %+v", dead)
	}
}

// Every URL gets every notice; without a dead-letter store a notice that
// cannot be delivered is an error, so the stream delivers its batch again.
func TestSeveralURLsAndNoDeadLetterStore(t *testing.T) {
	t.Parallel()
	r1, r2 := webhooktest.New("s"), webhooktest.New("s")
	defer r1.Close()
	defer r2.Close()
	n := newNotifier(t, []string{r1.URL, r2.URL}, "s", nil, func(c *webhook.Config) { c.MaxElapsed = 50 * time.Millisecond })
	if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
		t.Fatal(err)
	}
	r2.FailFor(time.Hour, 500, 0)
	if err := n.Notify(context.Background(), notice("b", 2)); err == nil || !strings.Contains(err.Error(), "b:2:TaskAvailable") {
		t.Fatalf("undeliverable without a store: %v", err)
	}
	if len(r1.Delivered()) != 2 || len(r2.Delivered()) != 1 {
		t.Fatalf("delivered %v and %v", r1.Delivered(), r2.Delivered())
	}
	if _, err := webhook.New(webhook.Config{URLs: []string{r1.URL}}); err == nil {
		t.Fatal("a webhook without a secret")
	}
	if _, err := webhook.ParseURLs("http://a, ftp://b"); err == nil {
		t.Fatal("an ftp URL")
	}
	if u, _ := webhook.ParseURLs(" http://a ,https://b,"); len(u) != 2 {
		t.Fatalf("urls %v", u)
	}
}

// A 3xx is an answer, not a delivery, and final: the notifier followed
// redirects, so the Location's answer decided the delivery (a 302's GET
// there, without the body, could count as delivered) and the signed
// notice went to whatever host the Location named.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	defer other.Close()
	for _, code := range []int{http.StatusFound, http.StatusTemporaryRedirect} {
		var attempts atomic.Int64
		hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			attempts.Add(1)
			http.Redirect(w, r, other.URL+"/hook", code)
		}))
		dl := &webhook.FileDeadLetters{Path: filepath.Join(t.TempDir(), "dead.jsonl")}
		n := newNotifier(t, []string{hook.URL}, "whsec", dl, func(c *webhook.Config) { c.Client = &http.Client{} })
		if err := n.Notify(context.Background(), notice("a", 1)); err != nil {
			t.Fatal(err)
		}
		hook.Close()
		if attempts.Load() != 1 {
			t.Errorf("%d: %d attempts, want 1 (a redirect is final)", code, attempts.Load())
		}
		if dead, _ := webhook.ReadDeadLetters(dl.Path); len(dead) != 1 || !strings.Contains(dead[0].Error, strconv.Itoa(code)) {
			t.Errorf("%d: dead letters %+v, want the redirect's status", code, dead)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests", n)
	}
}

// A TaskAvailable of a task that waits says until when; the others have
// no not_before at all.
func TestBodyOfAWaitingTask(t *testing.T) {
	t.Parallel()
	n := notice("task-d4e5", 4)
	nb := at.Add(10 * time.Second)
	n.NotBefore = &nb
	body, err := webhook.Body(n)
	if err != nil {
		t.Fatal(err)
	}
	if want := `,"not_before":"2026-03-20T14:35:10.123Z"}`; !strings.HasSuffix(string(body), want) {
		t.Fatalf("body %s, want it to end with %s", body, want)
	}
}
