package lease_test

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// pauseFirstWalk makes the store's first cycle walk stop after its first
// level is read, until the returned resume is called; paused is closed
// once it has stopped.
func pauseFirstWalk(e *env) (paused <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lease.OnGraphWalk(e.store, func() {
		once.Do(func() {
			close(p)
			<-r
		})
	})
	return p, sync.OnceFunc(func() { close(r) })
}

// A change of blocked_by walks the graph with no lock held: while one
// walks (a long chain, say), another change of blocked_by anywhere in the
// fleet is written at once. It used to hold the graph's lock from before
// its walk to after its write, so one caller's long walks, one after
// another, made every other change wait, and answer 503 after 20 s.
func TestAWalkHoldsNoLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "y", "z", "p", "q")
	e.create(t, lease.CreateTaskParams{TaskID: "y2", BlockedBy: []string{"z"}})
	lease.WaitForGraphLock(e.store, 50*time.Millisecond)
	paused, resume := pauseFirstWalk(e)
	defer resume()

	slow := make(chan error, 1)
	go func() {
		_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"y2"}})
		slow <- err
	}()
	<-paused
	// x's walk is under way; p's change does not wait for it.
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", BlockedBy: &[]string{"q"}}); err != nil {
		t.Fatalf("a change of blocked_by while another walks: %v, want it written at once", err)
	}
	resume()
	if err := <-slow; err != nil {
		t.Fatalf("the walking change: %v", err)
	}
	if got := e.get(t, "x"); got.Status != lease.StatusBlocked || len(got.BlockedBy) != 1 || got.BlockedBy[0].TaskID != "y2" {
		t.Errorf("x after its change: %s, blocked by %v", got.Status, got.BlockedBy)
	}
	if got := e.get(t, "p"); got.Status != lease.StatusBlocked {
		t.Errorf("p after its change: %s", got.Status)
	}
}

// A change written while another's walk runs is seen by it: the walk
// began before the epoch moved, so it walks again before writing. Here
// the change written meanwhile (z blocked by x) makes x blocked by y2 a
// cycle (x -> y2 -> z -> x) that x's first walk, which read z before the
// change, could not see.
func TestAWalkOvertakenByAChangeWalksAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "z")
	e.create(t, lease.CreateTaskParams{TaskID: "y2", BlockedBy: []string{"z"}})
	paused, resume := pauseFirstWalk(e)
	defer resume()

	slow := make(chan error, 1)
	go func() {
		_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"y2"}})
		slow <- err
	}()
	<-paused // x's walk has read z, not yet blocked by anything
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "z", AgentID: "b", BlockedBy: &[]string{"x"}}); err != nil {
		t.Fatalf("z blocked by x: %v", err)
	}
	resume()
	err := <-slow
	var ve *lease.ValidationError
	if !errors.As(err, &ve) || ve.Code != lease.CodeDependencyCycle {
		t.Fatalf("x blocked by y2 after z named x: %v, want dependency_cycle", err)
	}
	if got := e.get(t, "x"); len(got.BlockedBy) != 0 || got.Version != 1 {
		t.Errorf("x after its refused change: blocked by %v, version %d; want it unchanged", got.BlockedBy, got.Version)
	}
	if got := e.get(t, "y2"); len(got.Blocks) != 0 {
		t.Errorf("y2 blocks %v after the refused change, want none", got.Blocks)
	}
}

// A change that took the graph's lock and stopped before giving it back
// (its process killed between its write and its unlock) holds it until
// its until: then the next change takes it over, moving the epoch on
// (what the stopped one wrote may have landed after the next one's walk
// began), walks again and writes. The epoch never goes back.
func TestAGraphLockLeftBehindIsTakenOverOnceItsTimeIsUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	table := aws.String(e.names.Table(schema.HeartbeatsTable))
	key := map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#graph"}}
	_, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: table, Item: map[string]types.AttributeValue{
		"agent_id": key["agent_id"],
		"token":    &types.AttributeValueMemberS{Value: "graph-stopped"},
		"until":    &types.AttributeValueMemberN{Value: strconv.FormatInt(e.clock.Now().Add(-time.Second).UnixMilli(), 10)},
		"epoch":    &types.AttributeValueMemberN{Value: "7"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lease.WaitForGraphLock(e.store, 50*time.Millisecond)
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", BlockedBy: &[]string{"b"}}); err != nil {
		t.Fatalf("a change after a lock's time is up: %v, want it written", err)
	}
	out, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if _, held := out.Item["token"]; held {
		t.Errorf("the lock is still held after the change: %v", out.Item)
	}
	// 7, then 8 by the take-over, then 9 by the change's own write.
	if n, ok := out.Item["epoch"].(*types.AttributeValueMemberN); !ok || n.Value != "9" {
		t.Errorf("epoch after a take-over and one change: %v, want 9", out.Item["epoch"])
	}
}

// Many PATCHes of blocked_by racing on real goroutines over a small set
// of tasks, each naming random blockers: whatever interleaving the walks
// and writes take, the graph they leave has no cycle. Walks run with no
// lock, so a write that overtakes a walk must send it back to walk again.
func TestRacingPatchesOverAGraphLeaveNoCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n, writers, rounds = 8, 6, 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "g" + strconv.Itoa(i)
		e.task(t, ids[i])
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				self := ids[r.IntN(n)]
				var blockers []string
				for _, id := range ids {
					if id != self && r.IntN(3) == 0 {
						blockers = append(blockers, id)
					}
				}
				_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: self, AgentID: "w", BlockedBy: &blockers})
				var ve *lease.ValidationError
				if err != nil && !(errors.As(err, &ve) && ve.Code == lease.CodeDependencyCycle) && !errors.Is(err, lease.ErrBusy) {
					t.Errorf("PATCH %s blocked by %v: %v", self, blockers, err)
				}
			}
		}()
	}
	wg.Wait()
	edges := map[string][]string{}
	for _, id := range ids {
		for _, b := range e.get(t, id).BlockedBy {
			edges[id] = append(edges[id], b.TaskID)
		}
	}
	// Depth-first search for a cycle.
	state := map[string]int{} // 1: on the path, 2: done
	var visit func(id string, path []string)
	visit = func(id string, path []string) {
		switch state[id] {
		case 1:
			t.Fatalf("a cycle: %v -> %s (edges %v)", path, id, edges)
		case 2:
			return
		}
		state[id] = 1
		for _, b := range edges[id] {
			visit(b, append(path, id))
		}
		state[id] = 2
	}
	total := 0
	for _, id := range ids {
		visit(id, nil)
		total += len(edges[id])
	}
	if total == 0 {
		t.Fatal("no edge was written: the race tested nothing")
	}
	t.Logf("%d edges among %d tasks, no cycle", total, n)
}

// A change of blocked_by written during a walk sends it back only when it
// changed a task the walk read: one elsewhere in the graph leaves the walk
// as it was, and the PATCH writes without walking again. (Any change used
// to send every walk back: a long walk could be sent back again and again
// by another agent's unrelated edits, until its retries ran out, 503.)
func TestAWalkIsNotSentBackByAChangeElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "z", "p", "q")
	e.create(t, lease.CreateTaskParams{TaskID: "y2", BlockedBy: []string{"z"}})
	var levels atomic.Int32
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	lease.OnGraphWalk(e.store, func() {
		levels.Add(1)
		once.Do(func() {
			close(paused)
			<-resume
		})
	})
	slow := make(chan error, 1)
	go func() {
		_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"y2"}})
		slow <- err
	}()
	<-paused // x's walk has read y2 and z
	// p and q are not on x's walk (and p's own walk reads no level).
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", BlockedBy: &[]string{"q"}}); err != nil {
		t.Fatalf("p blocked by q: %v", err)
	}
	close(resume)
	if err := <-slow; err != nil {
		t.Fatalf("x blocked by y2: %v", err)
	}
	if n := levels.Load(); n != 1 {
		t.Errorf("x's change walked %d levels, want 1: a change elsewhere sent it back", n)
	}
	if got := e.get(t, "x"); got.Status != lease.StatusBlocked {
		t.Errorf("x is %s, want blocked", got.Status)
	}
}
