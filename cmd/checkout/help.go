package main

// The help of every command: its one-line summary (Short), what it does
// (Long) and its examples (Example), which --help prints and
// TestHelpOfEveryCommandHasExamplesAndNoKey holds to having examples. The
// commands themselves, with their flags and what they run, are in
// commands.go and the files named after them; errors.go maps what fails to
// a line on stderr and an exit status.

const rootShort = "Check tasks out and in on a checkout server"

const rootLong = `checkout checks tasks out on a checkout server, so that many agents can share
one pool of tasks without doing the same work twice.

  checkout <task-id> [--timeout 30m] [--reason TEXT]   check a task out
  checkout release <task-id>                           give it back
  checkout fail <task-id> [--error TEXT]               give it back as a failed attempt
  checkout complete <task-id>                          mark it done
  checkout list                                        who holds what

Tasks may wait for others (checkout tasks add --blocked-by): a blocked task
is not handed out until its blockers are done. Every checkout or claim is an
attempt. checkout fail holds the task back for its retry delay; an attempt
that fails (by checkout fail, a lease that timed out, or an agent that died)
once the task was taken --max-attempts times makes it failed.

Commands come before task ids: a task named like a command (or one slip
away from a command's name, like "lsit") is checked out with
"checkout checkout <task-id>" or "checkout -- <task-id>".

Configuration (each flag beats its variable; see checkout config --help for
profiles, which name a server, a key file and an agent):
  CHECKOUT_URL       the server (default ` + defaultURL + `), or --url
  CHECKOUT_API_KEY   your API key, or --api-key
  CHECKOUT_PROFILE   a profile of the profile file, or --profile
  CHECKOUT_CONFIG    the profile file, if not $XDG_CONFIG_HOME/checkout/config.toml
                     (default ~/.config/checkout/config.toml; checkout config shows it)
  CHECKOUT_AGENT     the agent to act as with a key not from a profile (default: the key's own), or --agent
  CHECKOUT_RUN_ID    the run's lease token (default: a fresh one per checkout), or --run-id; not used by mcp
  TZ                 show times in this zone (default UTC; an unknown zone is
                     warned about on stderr, and times are shown in UTC)
A CHECKOUT_ variable a letter or two away from one of these (CHECKOUT_AGNT) is
named on stderr with the setting it is close to, and ignored.

Exit status:
  0  success (also: you already hold the task you checked out)
  1  error: server unreachable, not a checkout server, bad key, forbidden, ...
  2  usage: bad flags, arguments or durations, an unknown command, or input the server refused
  3  denied: the task is held by someone else (or not held by you), or its state
     refused the request (it is blocked by unfinished tasks, it is not ready
     before its retry time, it exists, its version moved on, too many watchers, ...)
  4  not found: no such task, agent or message; nothing checked out; no task available`

const rootExample = `  checkout task-d4e5 --timeout 30m --reason "fix the login bug"
  checkout release task-d4e5
  checkout list
  checkout -- list          # a task literally named "list"
  checkout --profile writer claim`

const checkoutAliasShort = "Check a task out (the same as checkout <task-id>; use it for tasks named like a command)"

const checkoutAliasExample = `  checkout checkout task-d4e5 --timeout 2h
  checkout checkout release       # a task literally named "release"`

const releaseShort = "Release a task you hold (admins: --force releases anyone's)"

const releaseLong = `Gives a task back without finishing it: it goes back to todo at once and the
agents watching it get an inbox message. Only the holder may release it;
an admin may --force anyone's (audited as force_release; with --run-id or
--fence only that lease, a stuck run's, not one another run took since;
CHECKOUT_RUN_ID, the admin's own run, is not used; --agent is refused:
a force release ends whoever holds the task), or release it as its
holder with --agent (audited by the admin; the holder gets lease_lost,
reason force_release, as for complete). When the work failed, use checkout
fail instead: the task then waits before it is retried.`

const releaseExample = `  checkout release task-d4e5 --reason "blocked on review"
  checkout release task-d4e5 --fence 3          # a lease of your agent's earlier run
  checkout release task-d4e5 --force --reason stuck   # admins`

const failShort = "Give a task you hold back as a failed attempt (--error says what went wrong)"

const failLong = `Ends your lease like release, but as a failed attempt (outcome failed): the
--error text, if given, becomes the task's last error. The task is then held
back for its retry delay, doubled with each further failure (see checkout
tasks show), and after its max attempts it is failed for good until someone
reopens it. Give a task back with release when you merely stop, not because
the work failed.`

const failExample = `  checkout fail task-d4e5                                   # no error text
  checkout fail task-d4e5 --error "tests fail: TestLogin (timeout)"
  checkout fail task-d4e5 --fence 3 --error "out of disk"   # a lease of your agent's earlier run`

const statusShort = "Show whether a task is checked out, and by whom"

const statusLong = `Shows whether a live lease holds the task, whose it is and until when. With
--agent (or a profile's agent) it also says whether that agent is the holder.`

const statusExample = `  checkout status task-d4e5
  checkout status task-d4e5 --agent agent-a1b2
  checkout status task-d4e5 --json`

const listShort = "List the live checkouts (all, or one agent's)"

const listExample = `  checkout list
  checkout list --agent agent-a1b2
  checkout list --json`

const renewShort = "Extend your lease on a task"

const renewLong = `Extends the lease you hold: it now ends --timeout from now (default: the
lease's own timeout). Renew well before it ends, for example at a third of it.`

const renewExample = `  checkout renew task-d4e5
  checkout renew task-d4e5 --timeout 1h
  checkout renew task-d4e5 --fence 3            # a lease of your agent's earlier run`

const completeShort = "Mark a task you hold as done (ends the lease)"

const completeExample = `  checkout complete task-d4e5
  checkout complete task-d4e5 --fence 3         # a lease of your agent's earlier run`

const heartbeatShort = "Tell the server you are alive (after the first one, missing them ends your leases)"

const heartbeatExample = `  checkout heartbeat
  while sleep 30; do checkout heartbeat --ttl 90s; done`

const whoamiShort = "Say whose key you hold: its agent, and whether an admin's"

const whoamiExample = `  checkout whoami
  checkout whoami --json    # {"agent_id": ..., "name": ..., "admin": ...}`

const claimShort = "Check out the best open task of some queues"

const claimLong = `Checks out the open task of the given queues (default: the "default" queue)
with the highest priority, the oldest first within a priority. With --wait it
waits up to that long (at most 20s) for a task to become available. With a
run id (--run-id or CHECKOUT_RUN_ID) that already holds a lease, the claim is
that lease again: a retried claim is the same claim. A run whose claimed lease
has ended (completed, released, expired) gets no new task: the claim says so
and exits 4; claim under a new run id instead.`

const claimExample = `  checkout claim
  checkout claim --queue backend --wait 20s
  checkout claim --queue backend --queue research --timeout 10m --reason "next in line"
  checkout claim --agent agent-c3d4             # admins: for another agent`

const watchShort = "Get an inbox message when a task becomes available"

const watchLong = `Puts you on the task's watch list: your inbox gets one message the next time
the task is freed: its lease ends without completing it (released, failed,
timed out, its holder dead or cancelled), or its last blocker is done. A task
that is free now sends none until someone takes it and gives it back: check
it out instead.`

const watchExample = `  checkout watch task-d4e5
  checkout task-d4e5 --watch     # check out, or watch when it is held`

const inboxShort = "List your inbox: tasks you watched that became available, and leases you lost"

const inboxLong = `Lists your messages, oldest first: task_available for a task you watched that
became free (Reason: what freed it; Reason failed: the task used its attempts
and is failed, not free, until checkout tasks reopen), lease_lost for a lease
of yours that ended without you (Reason: timeout, agent_death, force_release,
including a release or completion an admin made for you, or cancel). When a lease was lost, Fence and
Run name which of your leases of the task it was; when a freed task waits
(a failed attempt's retry delay), Ready at says until when, while that is
still ahead on the server's clock. A message is kept
until you delete it, for up to 7 days.`

const inboxExample = `  checkout inbox
  checkout inbox delete 1774017480000.1.task-d4e5`

const inboxDeleteShort = "Delete an inbox message"

const inboxDeleteExample = `  checkout inbox delete 1774017480000.1.task-d4e5`

const eventsShort = "Show a task's audit trail, or every transition across the fleet"

const eventsLong = `With a task id: that task's audit trail, oldest first.

Without one: the fleet feed, every transition of every task, oldest first,
from --since (default: the last hour), or from --cursor, where an earlier
page ended (its last line gives the command). With --follow it keeps going,
printing each transition once, in order, about two seconds after it
happened (--interval: how often it asks once caught up), until
interrupted; with --json each event is one JSON line. The feed's flags
are refused with a task id, whose trail is read whole. A
server that cannot be reached at the start fails the command; one that
stops answering later is asked again until it answers, which stderr says.`

const eventsExample = `  checkout events task-d4e5
  checkout events task-d4e5 --json
  checkout events --since 2026-03-20T14:00:00Z
  checkout events --cursor <next-cursor>      # the next page, from the last one's More: line
  checkout events --follow --type release,timeout,agent_death,force_release
  checkout events --follow --json | jq -c .`

const tasksShort = "Create, list, show, edit, cancel and reopen tasks"

const tasksExample = `  checkout tasks add task-d4e5 --title "Fix login bug"
  checkout tasks list --status todo
  checkout tasks show task-d4e5`

const tasksAddShort = "Create a task (the server picks the id when none is given)"

const tasksAddExample = `  checkout tasks add task-d4e5 --title "Fix login bug"
  checkout tasks add --title "Write release notes"   # the server picks the id
  checkout tasks add bug-17 --title "Login fails" --queue backend --priority 9 --description "Since 2.3"
  checkout tasks add deploy --blocked-by build,test --max-attempts 3 --retry-delay 30s
  checkout tasks add report --not-before 2026-03-21T09:00:00Z   # or --not-before 10m: ten minutes from now`

const tasksCancelShort = "Cancel a task (a live lease on it: its holder or an admin only)"

const tasksCancelLong = `Cancels a task. If it is checked out, only its holder or an admin may, and
the lease ends (a cancel event); its watchers are told.`

const tasksCancelExample = `  checkout tasks cancel task-d4e5`

const tasksReopenShort = "Reopen a done, cancelled or failed task (it becomes todo, or blocked while a blocker is not done; its attempts start again)"

const tasksReopenExample = `  checkout tasks reopen task-d4e5`

const tasksListShort = "List tasks, one page at a time"

const tasksListLong = `Lists tasks, of one status or queue when given, a page of --limit tasks at a
time. The server's pages may come short, even empty, and still go on (each
page's reads are bounded): the command reads on, 10 pages at most, to fill
the page asked for. A More: line gives the command for the next page.`

const tasksListExample = `  checkout tasks list
  checkout tasks list --status todo --limit 20
  checkout tasks list --status blocked
  checkout tasks list --cursor <next-cursor>`

const tasksShowShort = "Show one task: its lease, what it waits for and what waits for it, its attempts and last error"

const tasksShowExample = `  checkout tasks show task-d4e5`

const tasksEditShort = "Change a task's fields: title, description, queue, priority, metadata, blockers, attempts, retry delay, not-before"

const tasksEditLong = `Changes the fields given and leaves the others; a checked-out task keeps its
lease. With --if-version the change is made only if the task is still at that
version (see "tasks show"); otherwise the answer is version_mismatch.

--blocked-by replaces the tasks it waits for (--blocked-by "" clears them), and
only on a todo or blocked task: it becomes blocked while one of them is not
done, todo otherwise. --not-before "" clears the time it waits for.`

const tasksEditExample = `  checkout tasks edit task-d4e5 --priority 9
  checkout tasks edit task-d4e5 --queue research --title "Look into login" --if-version 4
  checkout tasks edit deploy --blocked-by build --max-attempts 10
  checkout tasks edit deploy --blocked-by "" --not-before ""   # wait for nothing`

const agentsShort = "Register, list and remove agents (admins only)"

const agentsExample = `  checkout agents add researcher --id agent-a1b2
  checkout agents list
  checkout agents remove agent-a1b2`

const agentsAddShort = "Register an agent and print its API key (shown once)"

const agentsAddExample = `  checkout agents add researcher --id agent-a1b2
  checkout agents add ops --admin`

const agentsListShort = "List the registered agents"

const agentsListExample = `  checkout agents list`

const agentsRemoveShort = "Remove an agent: its key stops working and its leases end"

const agentsRemoveExample = `  checkout agents remove agent-a1b2`

const mcpShort = "Serve the checkout tools to an MCP client over stdio"

const mcpLong = `Runs a Model Context Protocol server on stdin/stdout, acting as the agent
whose key the settings give (CHECKOUT_API_KEY, --api-key or a profile)
against the server they name. Its tools: checkout_task, claim_task,
renew_task, complete_task, release_task, fail_task, task_status,
list_checkouts, list_tasks, list_queues, get_task, create_task, update_task,
watch_task, read_inbox, ack_message and heartbeat.

One process is one agent run: its checkouts share one run id, a fresh
one (CHECKOUT_RUN_ID is not used; a line on stderr says so). A process
that restarted finds the leases its agent took under the old run; it adopts
one with checkout_task adopt=true, or by giving the lease's fence to
renew_task, release_task or complete_task.`

const mcpExample = `  checkout mcp
  checkout mcp --profile researcher
  CHECKOUT_URL=http://127.0.0.1:3100 CHECKOUT_API_KEY=ck_... checkout mcp`
