package main

import "testing"

// checkout queues: each queue's tasks by status and its oldest todo task,
// as the change stream has counted them.
func TestQueueCountsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &transcript{t: t, e: e}
	tr.run("agent-a1b2", 0, "queues")
	tr.run("agent-a1b2", 0, "tasks", "add", "bug", "--queue", "backend", "--priority", "9", "--title", "Login 500")
	tr.run("agent-a1b2", 0, "tasks", "add", "tidy", "--queue", "backend", "--priority", "2", "--title", "Tidy logs")
	tr.run("agent-a1b2", 0, "tasks", "add", "notes", "--title", "Release notes")
	tr.run("agent-c3d4", 0, "claim", "--queue", "backend")
	tr.run("agent-a1b2", 0, "tasks", "cancel", "notes")
	tr.run("agent-a1b2", 0, "queues")
	tr.run("agent-a1b2", 0, "queues", "--json")
	tr.run("agent-a1b2", 2, "queues", "extra")
	golden(t, "queue-counts", tr.b.String())
}
