package lease_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

func TestAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	// The agent registered first, whose key removal revokes.
	var reg lease.Registration
	t.Run("register and authenticate", func(t *testing.T) {
		reg = must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "agent-a1b2", Name: "researcher"}))
		if reg.APIKey == "" || reg.AgentID != "agent-a1b2" || reg.Name != "researcher" || reg.Admin {
			t.Fatalf("registration = %+v", reg)
		}
		p := must[lease.Principal](t)(e.store.Authenticate(c, reg.APIKey))
		if p != (lease.Principal{AgentID: "agent-a1b2", Name: "researcher"}) {
			t.Fatalf("principal = %+v", p)
		}
		if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "agent-a1b2", Name: "again"}); !errors.Is(err, lease.ErrAgentExists) {
			t.Fatalf("duplicate agent: %v", err)
		}
		for _, bad := range []lease.RegisterParams{{AgentID: "-bad", Name: "x"}, {AgentID: "ok", Name: ""}, {AgentID: "has space", Name: "x"}} {
			var ve *lease.ValidationError
			if _, err := e.store.RegisterAgent(c, bad); !errors.As(err, &ve) {
				t.Fatalf("register %+v: %v, want validation error", bad, err)
			}
		}
		gen := must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{Name: "generated", Admin: true}))
		if !lease.ValidID(gen.AgentID) || !gen.Admin {
			t.Fatalf("generated = %+v", gen)
		}
		for _, key := range []string{"", "ck_nope", reg.APIKey + "x"} {
			if _, err := e.store.Authenticate(c, key); !errors.Is(err, lease.ErrUnauthorized) {
				t.Fatalf("authenticate %q: %v", key, err)
			}
		}
	})
	t.Run("liveness: never, alive, dead", func(t *testing.T) {
		e.caughtUp(t) // the agents are listed through an index
		agents := must[[]lease.Agent](t)(e.store.ListAgents(c))
		if len(agents) != 2 {
			t.Fatalf("agents = %+v", agents)
		}
		for _, a := range agents {
			if a.Alive != nil || a.LastHeartbeatAt != nil {
				t.Fatalf("agent without heartbeat has liveness: %+v", a)
			}
		}
		hb := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "agent-a1b2", 0))
		if want := e.clock.Now().Add(lease.DefaultHeartbeatTTL); !hb.ExpiresAt.Equal(want) {
			t.Fatalf("heartbeat expires %v, want %v", hb.ExpiresAt, want)
		}
		alive := func() bool {
			for _, a := range must[[]lease.Agent](t)(e.store.ListAgents(c)) {
				if a.AgentID == "agent-a1b2" {
					return *a.Alive
				}
			}
			t.Fatal("agent missing")
			return false
		}
		if !alive() {
			t.Fatal("agent should be alive after a heartbeat")
		}
		e.clock.Advance(lease.DefaultHeartbeatTTL)
		if alive() {
			t.Fatal("agent should be dead once its heartbeat expired")
		}
		for _, ttl := range []time.Duration{time.Millisecond, 2 * time.Hour} {
			var ve *lease.ValidationError
			if _, err := e.store.Heartbeat(c, "agent-a1b2", ttl); !errors.As(err, &ve) || ve.Code != "invalid_timeout" {
				t.Fatalf("heartbeat ttl %v: %v", ttl, err)
			}
		}
	})
	t.Run("get, then remove: the key stops working", func(t *testing.T) {
		if a := must[lease.Agent](t)(e.store.GetAgent(c, "agent-a1b2")); a.Name != "researcher" || a.Admin {
			t.Fatalf("get agent %+v", a)
		}
		if err := e.store.RemoveAgent(c, "agent-a1b2"); err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Authenticate(c, reg.APIKey); !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatalf("revoked key authenticates: %v", err)
		}
		if _, err := e.store.GetAgent(c, "agent-a1b2"); !errors.Is(err, lease.ErrAgentNotFound) {
			t.Fatalf("get removed agent: %v", err)
		}
		if err := e.store.RemoveAgent(c, "agent-a1b2"); !errors.Is(err, lease.ErrAgentNotFound) {
			t.Fatalf("remove twice: %v", err)
		}
	})
}

func TestEnsureAgentReplacesKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "first-admin-key-123"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "first-admin-key-123"); err != nil {
		t.Fatal(err)
	}
	p := must[lease.Principal](t)(e.store.Authenticate(c, "first-admin-key-123"))
	if !p.Admin || p.AgentID != "admin" {
		t.Fatalf("principal %+v", p)
	}
	if err := e.store.EnsureAgent(c, "admin", "admin", true, "second-admin-key-456"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Authenticate(c, "first-admin-key-123"); !errors.Is(err, lease.ErrUnauthorized) {
		t.Fatalf("replaced key still works: %v", err)
	}
	must[lease.Principal](t)(e.store.Authenticate(c, "second-admin-key-456"))
	e.caughtUp(t) // the agents are listed through an index
	if n := len(must[[]lease.Agent](t)(e.store.ListAgents(c))); n != 1 {
		t.Fatalf("%d agents, want 1", n)
	}
}

func TestTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	// The task created without an id, listed in the pages.
	var gen lease.Task
	t.Run("create and get", func(t *testing.T) {
		task := must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "task-d4e5", Title: "Fix login bug"}))
		if task.Status != lease.StatusTodo || task.Title != "Fix login bug" || !task.CreatedAt.Equal(e.clock.Now()) || task.Checkout != nil || task.StartedAt != nil {
			t.Fatalf("created %+v", task)
		}
		if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "task-d4e5"}); !errors.Is(err, lease.ErrTaskExists) {
			t.Fatalf("duplicate: %v", err)
		}
		if _, err := e.store.GetTask(c, "nope"); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Fatalf("get missing: %v", err)
		}
		var ve *lease.ValidationError
		if _, err := e.store.GetTask(c, "bad id"); !errors.As(err, &ve) || ve.Code != "invalid_id" {
			t.Fatalf("get bad id: %v", err)
		}
		e.clock.Advance(time.Second)
		gen = must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{}))
		if !lease.ValidID(gen.TaskID) {
			t.Fatalf("generated id %q", gen.TaskID)
		}
	})
	t.Run("list in pages, in creation order", func(t *testing.T) {
		// Pagination over 7 tasks, 3 per page, in creation order.
		for i := range 5 {
			e.clock.Advance(time.Second)
			e.task(t, "page-"+string(rune('a'+i)))
		}
		e.checkout(t, "page-b", "agent-1", time.Minute)
		e.caughtUp(t) // the listings read the indexes
		var all []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Limit: 3, Cursor: cursor}))
			for _, tk := range page.Tasks {
				all = append(all, tk.TaskID+":"+string(tk.Status))
			}
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		want := []string{"task-d4e5:todo", gen.TaskID + ":todo", "page-a:todo", "page-c:todo", "page-d:todo", "page-e:todo", "page-b:in_progress"}
		if !slices.Equal(all, want) {
			t.Fatalf("listing\n got %v\nwant %v", all, want)
		}
		inProgress := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusInProgress}))
		if len(inProgress.Tasks) != 1 || inProgress.Tasks[0].Checkout == nil || inProgress.NextCursor != "" {
			t.Fatalf("in progress = %+v", inProgress)
		}
		for _, bad := range []lease.ListTasksParams{{Limit: -1}, {Limit: 1001}, {Status: "weird"}, {Cursor: "!!"}, {Cursor: "eyJzIjo5fQ"}} {
			var ve *lease.ValidationError
			if _, err := e.store.ListTasks(c, bad); !errors.As(err, &ve) {
				t.Fatalf("list %+v: %v", bad, err)
			}
		}
	})
}

func TestCheckoutCases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	t.Run("invalid input and missing tasks", func(t *testing.T) {
		var ve *lease.ValidationError
		for _, bad := range []lease.CheckoutParams{
			{TaskID: "t1", AgentID: "a", Timeout: time.Millisecond},
			{TaskID: "t1", AgentID: "a", Timeout: 25 * time.Hour},
		} {
			if _, err := e.store.Checkout(c, bad); !errors.As(err, &ve) || ve.Code != "invalid_timeout" {
				t.Fatalf("checkout %+v: %v", bad, err)
			}
		}
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", ExpectedStatuses: []lease.Status{"nope"}}); !errors.As(err, &ve) {
			t.Fatalf("bad expected status: %v", err)
		}
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "missing", AgentID: "a"}); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Fatalf("missing task: %v", err)
		}
		auto := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "auto", AgentID: "a", CreateIfMissing: true}))
		if auto.Fence != 1 {
			t.Fatalf("auto-created checkout %+v", auto)
		}
	})
	// The lease the first checkout of t1 grants, which the later steps see.
	want := lease.Checkout{TaskID: "t1", AgentID: "a", AgentName: "researcher", RunID: "run-1", Fence: 1,
		LockedAt: e.clock.Now(), Timeout: lease.DefaultTimeout, ExpiresAt: e.clock.Now().Add(lease.DefaultTimeout), Reason: "fixing",
		Title: "title of t1", Queue: "default", Priority: 5, Attempt: 1}
	t.Run("grant, and the same run retrying", func(t *testing.T) {
		got := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", AgentName: "researcher", RunID: "run-1", Reason: "fixing"}))
		if got != want {
			t.Fatalf("checkout\n got %+v\nwant %+v", got, want)
		}
		// Same run retrying: same lease, same fence.
		e.clock.Advance(time.Second)
		again := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", RunID: "run-1"}))
		if again != want {
			t.Fatalf("idempotent retry\n got %+v\nwant %+v", again, want)
		}
	})
	t.Run("conflicts name the holder", func(t *testing.T) {
		// Another run of the same agent, and another agent: conflict naming the holder.
		for _, p := range []lease.CheckoutParams{{TaskID: "t1", AgentID: "a", RunID: "run-2"}, {TaskID: "t1", AgentID: "b", Watch: true}} {
			var ce *lease.ConflictError
			if _, err := e.store.Checkout(c, p); !errors.As(err, &ce) || ce.Holder != want || !errors.Is(err, lease.ErrCheckedOut) {
				t.Fatalf("checkout %+v: %v", p, err)
			}
		}
		task := must[lease.Task](t)(e.store.GetTask(c, "t1"))
		if task.Status != lease.StatusInProgress || task.Checkout == nil || *task.Checkout != want || !task.StartedAt.Equal(want.LockedAt) {
			t.Fatalf("task %+v", task)
		}
		if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); lock == nil || *lock != want {
			t.Fatalf("lock status %+v", lock)
		}
	})
	t.Run("release tells the watcher once", func(t *testing.T) {
		// b watched on conflict: release tells it once.
		rel := must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "a"}))
		if rel.ReleasedBy != "a" || rel.Held != time.Second {
			t.Fatalf("released %+v", rel)
		}
		msgs := e.inbox(t, "b")
		if len(msgs) != 1 || msgs[0].TaskID != "t1" || msgs[0].Type != lease.MessageTaskAvailable || msgs[0].Reason != "release" {
			t.Fatalf("inbox %+v", msgs)
		}
		if err := e.store.DeleteMessage(c, "b", msgs[0].MessageID); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{msgs[0].MessageID, "nonsense"} {
			if err := e.store.DeleteMessage(c, "b", id); !errors.Is(err, lease.ErrMessageNotFound) {
				t.Fatalf("delete %q: %v", id, err)
			}
		}
		if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); lock != nil {
			t.Fatalf("released task still locked: %+v", lock)
		}
		if e.noticeCount(t, lease.NoticeTaskAvailable, "t1") != 1 {
			t.Fatalf("notices %+v", e.notes.Notices())
		}
	})
	t.Run("held beats status mismatch, and a done task is not handed out", func(t *testing.T) {
		// Status mismatch, in the order the API gives (httpapi/openapi/openapi.yaml): held beats mismatch.
		e.task(t, "t2")
		var sm *lease.StatusMismatchError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "a", ExpectedStatuses: []lease.Status{lease.StatusDone}}); !errors.As(err, &sm) || sm.Status != lease.StatusTodo {
			t.Fatalf("status mismatch: %v", err)
		}
		e.checkout(t, "t2", "a", time.Minute)
		var ce *lease.ConflictError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "b", ExpectedStatuses: []lease.Status{lease.StatusDone}}); !errors.As(err, &ce) {
			t.Fatalf("held and mismatched: %v, want conflict", err)
		}
		done := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t2", AgentID: "a"}))
		if d, ok := done.Duration(); done.Status != lease.StatusDone || !ok || d != 0 || done.Checkout != nil {
			t.Fatalf("completed %+v", done)
		}
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "b"}); !errors.As(err, &sm) || sm.Status != lease.StatusDone {
			t.Fatalf("checkout of done task: %v", err)
		}
		if e.noticeCount(t, lease.NoticeTaskAvailable, "t2") != 0 {
			t.Fatal("completion must not announce the task")
		}
	})
}

func TestHolderOperations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	t.Run("no lease, or no task", func(t *testing.T) {
		for _, err := range []error{
			errOf(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"})),
			errOf(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"})),
			errOf(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a"})),
			errOf(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})),
		} {
			if !errors.Is(err, lease.ErrNotCheckedOut) {
				t.Fatalf("free task: %v, want not checked out", err)
			}
		}
		for _, err := range []error{
			errOf(e.store.Renew(c, lease.RenewParams{TaskID: "nope", AgentID: "a"})),
			errOf(e.store.Release(c, lease.ReleaseParams{TaskID: "nope", AgentID: "a"})),
			errOf(e.store.Complete(c, lease.CompleteParams{TaskID: "nope", AgentID: "a"})),
		} {
			if !errors.Is(err, lease.ErrTaskNotFound) {
				t.Fatalf("missing task: %v", err)
			}
		}
	})
	held := e.checkout(t, "t", "a", 10*time.Minute)
	t.Run("others are not the holder", func(t *testing.T) {
		for _, err := range []error{
			errOf(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "b"})),
			errOf(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: "other-run"})),
			errOf(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", Fence: held.Fence + 1})),
			errOf(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b"})),
			errOf(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "b"})),
		} {
			var nh *lease.NotHolderError
			if !errors.As(err, &nh) || nh.Holder != held {
				t.Fatalf("not holder: %v", err)
			}
		}
	})
	t.Run("the holder renews", func(t *testing.T) {
		e.clock.Advance(5 * time.Minute)
		r := must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: held.RunID, Fence: held.Fence}))
		if !r.ExpiresAt.Equal(e.clock.Now().Add(10*time.Minute)) || r.Timeout != 10*time.Minute || r.Fence != held.Fence || !r.LockedAt.Equal(held.LockedAt) {
			t.Fatalf("renewed %+v", r)
		}
		r = must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", Timeout: time.Hour}))
		if !r.ExpiresAt.Equal(e.clock.Now().Add(time.Hour)) || r.Timeout != time.Hour {
			t.Fatalf("renewed with timeout %+v", r)
		}
		var ve *lease.ValidationError
		if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", Timeout: 48 * time.Hour}); !errors.As(err, &ve) {
			t.Fatalf("renew bad timeout: %v", err)
		}
	})
	t.Run("an admin force-releases, and the trail says so", func(t *testing.T) {
		rel := must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true, Reason: "stuck"}))
		if rel.Held != 5*time.Minute || rel.ReleasedBy != "admin" {
			t.Fatalf("force release %+v", rel)
		}
		evs := e.events(t, "t")
		if got := kinds(evs); !slices.Equal(got, []lease.EventType{"checkout", "renew", "renew", "force_release"}) {
			t.Fatalf("events %v", got)
		}
		last := evs[len(evs)-1]
		if last.By != "admin" || last.AgentID != "a" || last.Reason != "stuck" || last.Held == nil || *last.Held != 5*time.Minute || last.Fence != held.Fence {
			t.Fatalf("force release event %+v", last)
		}
		for _, ev := range evs[:3] {
			if ev.Held != nil {
				t.Fatalf("%s event has held", ev.Type)
			}
		}
	})
}

func errOf[T any](_ T, err error) error { return err }

func TestWatchAndClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	if err := e.store.Watch(c, "nope", "a"); !errors.Is(err, lease.ErrTaskNotFound) {
		t.Fatalf("watch missing: %v", err)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim from empty pool: %v", err)
	}
	for _, id := range []string{"old", "mid", "new"} {
		e.task(t, id)
		e.clock.Advance(time.Second)
	}
	e.checkout(t, "old", "x", time.Minute)
	e.clock.Advance(time.Second)
	e.caughtUp(t) // the claims find the tasks through an index
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-a"}))
	if got.TaskID != "mid" {
		t.Fatalf("claimed %s, want the oldest free todo task mid", got.TaskID)
	}
	again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-a"}))
	if again != got {
		t.Fatalf("claim retry with the same run got %+v, want %+v", again, got)
	}
	if next := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"})); next.TaskID != "new" {
		t.Fatalf("second claim got %s", next.TaskID)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "c"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim when all taken: %v", err)
	}
	// An expired lease frees its task for claims once a sweep has ended it
	// (a named checkout would take it at once).
	e.clock.Advance(time.Minute)
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "c"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of an expired lease before a sweep: %v", err)
	}
	must[lease.SweepResult](t)(e.store.Sweep(c))
	e.caughtUp(t) // the claim finds old, swept, through an index
	if got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "c", Timeout: time.Minute})); got.TaskID != "old" {
		t.Fatalf("claim after expiry got %s, want old", got.TaskID)
	}
	if got := kinds(e.events(t, "old")); !slices.Equal(got, []lease.EventType{"checkout", "timeout", "checkout"}) {
		t.Fatalf("old's events %v", got)
	}
	// Live checkouts, all and by agent.
	e.caughtUp(t) // they are listed through an index
	all := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, ""))
	if len(all) != 3 || all[0].TaskID != "mid" || all[2].TaskID != "old" {
		t.Fatalf("checkouts %+v", all)
	}
	if mine := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a")); len(mine) != 1 || mine[0].TaskID != "mid" {
		t.Fatalf("a's checkouts %+v", mine)
	}
}

func TestRemoveAgentEndsItsLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	reg := must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "doomed", Name: "doomed"}))
	e.task(t, "t")
	e.checkout(t, "t", reg.AgentID, time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the removal finds the lease through an index
	if err := e.store.RemoveAgent(c, reg.AgentID); err != nil {
		t.Fatal(err)
	}
	task := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if task.Checkout != nil || task.Status != lease.StatusTodo {
		t.Fatalf("removed agent's task %+v", task)
	}
	evs := e.events(t, "t")
	last := evs[len(evs)-1]
	if last.Type != lease.EventAgentDeath || last.Reason != "agent removed" || last.Held == nil || *last.Held != time.Minute {
		t.Fatalf("ending event %+v", last)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("watcher inbox %+v", msgs)
	}
}

// A lease that had expired when its holder was removed ended by its
// expiry: the trail says timeout, held until the expiry, and its watchers
// are told it timed out, not that its holder died.
func TestRemovingAnAgentAfterItsLeaseExpiredRecordsTheTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	reg := must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "late", Name: "late"}))
	e.task(t, "t")
	e.checkout(t, "t", reg.AgentID, time.Minute)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(3 * time.Minute) // expired two minutes ago; no sweep since
	e.caughtUp(t)                    // the removal finds the lease through an index
	if err := e.store.RemoveAgent(c, reg.AgentID); err != nil {
		t.Fatal(err)
	}
	evs := e.events(t, "t")
	last := evs[len(evs)-1]
	if last.Type != lease.EventTimeout || last.Held == nil || *last.Held != time.Minute {
		t.Fatalf("ending event %+v, want a timeout held 1m", last)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Reason != string(lease.EventTimeout) {
		t.Fatalf("watcher inbox %+v, want one message for the timeout", msgs)
	}
}

// A holder operation that names another run or fence of the caller's own
// lease is not_holder, and says that the holder is the caller.
func TestNotHolderSaysWhenTheHolderIsTheCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Minute)
	_, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: "run-other"})
	var nh *lease.NotHolderError
	if !errors.As(err, &nh) || nh.Holder.AgentID != "a" || nh.Holder.RunID != co.RunID || nh.Caller != "a" {
		t.Fatalf("renew naming another run: %v (%+v), want not_holder with holder a and caller a", err, nh)
	}
	_, err = e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b"})
	if !errors.As(err, &nh) || nh.Holder.AgentID != "a" || nh.Caller != "b" {
		t.Fatalf("release by b: %v (%+v), want not_holder with holder a and caller b", err, nh)
	}
}
