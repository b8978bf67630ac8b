package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// `checkout claim --wait` interrupted (Ctrl-C) while it waited on the
// server said only that the claim may have taken a task: behind a gateway
// that does not pass the disconnect on (API Gateway), the server went on
// waiting and took the next task that came, held by an agent whose
// command had ended until its lease timed out. The command now sees the
// claim through and gives that task back, and says so.
func TestAnInterruptedClaimGivesItsTaskBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := testenv.NewFront(t, e.srv.URL()) // passes no disconnect on
	cmd := exec.Command(binary, "claim", "--queue", "late", "--wait", "5s")
	cmd.Env = cleanEnv("CHECKOUT_URL="+f.URL, "CHECKOUT_API_KEY="+e.keys["agent-a1b2"])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// The claim has reached the server, which waits for a task; the
	// command is interrupted; then a task comes.
	f.WaitFor(t, "POST /api/claim", 15*time.Second)
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: "late", Queue: "late"}); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-exited:
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("the interrupted claim did not end; stderr %q", stderr.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != exitError {
		t.Errorf("exit: %v; want %d", err, exitError)
	}
	if msg := stderr.String(); !strings.Contains(msg, "interrupted: waiting for the claim's answer") || !strings.Contains(msg, "had taken task late (fence 1), which was given back") {
		t.Errorf("stderr %q; want it to say it waits for the claim, and that the task it took was given back", msg)
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q; want nothing: no lease was handed to the caller", stdout.String())
	}
	task, err := e.admin.GetTask(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.admin.Status(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if task.Attempts != 1 || st.Locked {
		t.Errorf("the task after the interrupted claim: %d attempts, locked %v (%+v); want taken once and given back", task.Attempts, st.Locked, st.Checkout)
	}
}
