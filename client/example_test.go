package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// newAgent starts an in-process local server with the given tasks and
// returns a client for a registered agent named name. In a real program:
// client.New(os.Getenv("CHECKOUT_URL"), os.Getenv("CHECKOUT_API_KEY")).
func newAgent(name string, tasks ...string) (*client.Client, func()) {
	srv, admin, err := client.StartServer(nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	reg, err := admin.CreateAgent(ctx, client.CreateAgentRequest{Name: name, AgentID: "agent-" + name})
	if err != nil {
		log.Fatal(err)
	}
	for _, id := range tasks {
		if _, err := admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id}); err != nil {
			log.Fatal(err)
		}
	}
	return client.New(srv.URL(), reg.APIKey), func() { srv.Close() }
}

func ExampleClient_WorkOn() {
	c, stop := newAgent("researcher", "task-d4e5")
	defer stop()
	ctx := context.Background()

	// WorkOn holds the lease while the function runs, renewing it in the
	// background; it completes the task when the function returns nil.
	err := c.WorkOn(ctx, "task-d4e5", func(ctx context.Context, l *client.Lease) error {
		fmt.Println("working on", l.TaskID(), "as", l.Checkout().AgentName)
		return nil
	}, client.LeaseTimeout(10*time.Minute), client.Reason("fix the login bug"))
	var conflict *client.ConflictError
	switch {
	case errors.As(err, &conflict):
		fmt.Println("held by", conflict.Holder.AgentName, "- pick another task")
	case errors.Is(err, client.ErrLeaseLost):
		fmt.Println("lost the lease; the work was cancelled")
	case err != nil:
		log.Fatal(err)
	}

	task, err := c.GetTask(ctx, "task-d4e5")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(task.TaskID, task.Status)
	// Output:
	// working on task-d4e5 as researcher
	// task-d4e5 done
}

func ExampleClient_ClaimLoop() {
	c, stop := newAgent("worker", "task-1", "task-2", "task-3")
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// ClaimLoop claims the oldest open task, runs the function under its
	// lease, and claims the next; it waits (with jitter) while the pool is
	// empty and returns when ctx is done.
	var done atomic.Int32
	err := c.ClaimLoop(ctx, func(ctx context.Context, l *client.Lease) error {
		fmt.Println("claimed", l.TaskID())
		if done.Add(1) == 3 {
			cancel() // stop after three tasks
		}
		return nil
	}, client.LeaseTimeout(5*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	// Output:
	// claimed task-1
	// claimed task-2
	// claimed task-3
}

func ExampleConflictError() {
	c, stop := newAgent("writer", "task-d4e5")
	defer stop()
	ctx := context.Background()
	if _, err := c.Checkout(ctx, "task-d4e5", client.CheckoutRequest{RunID: "run-1"}); err != nil {
		log.Fatal(err)
	}

	// Another run of the same agent is refused with the holder's details.
	_, err := c.Checkout(ctx, "task-d4e5", client.CheckoutRequest{RunID: "run-2"})
	var conflict *client.ConflictError
	if errors.As(err, &conflict) {
		fmt.Printf("held by %s (%s), run %s, timeout %s\n", conflict.Holder.AgentName,
			conflict.Holder.AgentID, conflict.Holder.RunID, conflict.Holder.Timeout())
	}
	fmt.Println(errors.Is(err, client.ErrCheckedOut))
	// Output:
	// held by writer (agent-writer), run run-1, timeout 30m0s
	// true
}

func ExampleBlockedError() {
	c, stop := newAgent("planner", "build")
	defer stop()
	ctx := context.Background()

	// deploy waits for build: nobody can take it until build is done.
	deploy, err := c.CreateTask(ctx, client.CreateTaskRequest{TaskID: "deploy", BlockedBy: []string{"build"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(deploy.TaskID, deploy.Status)

	_, err = c.Checkout(ctx, "deploy", client.CheckoutRequest{})
	var blocked *client.BlockedError
	if errors.As(err, &blocked) {
		for _, b := range blocked.BlockedBy {
			fmt.Printf("waits for %s (%s)\n", b.TaskID, b.Status)
		}
	}
	fmt.Println(errors.Is(err, client.ErrBlocked))
	// Output:
	// deploy blocked
	// waits for build (todo)
	// true
}
