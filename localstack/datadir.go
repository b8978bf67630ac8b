package localstack

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// CheckDataDir makes sure that path can hold dynalite's data, so that a bad
// one is refused in one line naming it, rather than by a stack trace of
// dynalite's or a start that never ends: it is created if missing, and must
// be a directory, writable, and not in use by another process (another
// server or dynalite on the same directory holds LevelDB's LOCK in it;
// one on its way out is waited for, up to lockLetGo).
// The error's text starts with the path: "/x is not a directory".
func CheckDataDir(path string) error {
	return CheckDataDirContext(context.Background(), path)
}

// CheckDataDirContext is CheckDataDir, whose wait for a holder on its way
// out ends at once when ctx does (a Ctrl-C during a server's start), with
// ctx's error.
func CheckDataDirContext(ctx context.Context, path string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, err := filepath.Abs(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fi, err := os.Stat(p)
	switch {
	case err != nil: // missing, or a parent is a file or out of reach: MkdirAll says which
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("%s cannot be created: %w", p, err)
		}
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", p)
	}
	f, err := os.CreateTemp(p, ".write-probe-*")
	if err != nil {
		return fmt.Errorf("%s is not writable: %w", p, errors.Unwrap(err))
	}
	name := f.Name()
	_ = f.Close()
	if err := os.Remove(name); err != nil {
		return fmt.Errorf("%s is not writable: %w", p, err)
	}
	// A holder may be on its way out: the dynalite of a server just
	// killed dies with it (the kernel kills it), and lets go of the LOCK
	// some milliseconds later. It is given lockLetGo to do so.
	deadline := time.Now().Add(lockLetGo)
	_, mine := heldDirs.Load(p)
	for {
		pid, err := lockHolder(filepath.Join(p, "LOCK"))
		if err == nil && pid == 0 && !mine {
			// A server that holds the directory (HoldDataDir) while its
			// dynalite is being restarted, when no LOCK is held.
			pid, err = serverLockHolder(filepath.Join(p, serverLockFile))
		}
		switch {
		case err != nil:
			return fmt.Errorf("%s: cannot tell whether it is in use: %w", p, err)
		case pid == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%s is in use by another process (pid %d holds its LOCK: another checkout-server or dynalite on the same directory?): stop that process, or use another directory", p, pid)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for the process that holds it (pid %d) to let go: %w", p, pid, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lockLetGo is how long CheckDataDir waits for a process holding the
// directory's LOCK to let go of it before it refuses the directory.
const lockLetGo = 2 * time.Second

// serverLockFile is the file in a data directory that a server holds
// (HoldDataDir) for as long as it uses the directory, its dynalite's
// restarts included, when LevelDB's LOCK is free.
const serverLockFile = ".checkout-server.lock"

// heldDirs are the directories this process holds (HoldDataDir): its own
// dynalite's restarts are not refused by its lock.
var heldDirs sync.Map

// HoldDataDir checks path as CheckDataDir does and takes it for this
// process until release: CheckDataDir in any other process, and
// HoldDataDir in this one, then refuse it as in use, even while no
// dynalite runs on it (a supervised dynalite being restarted). The lock
// goes with the process if it dies. The check's wait ends with ctx.
func HoldDataDir(ctx context.Context, path string) (release func(), err error) {
	p, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := CheckDataDirContext(ctx, p); err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(p, serverLockFile))
	if errors.Is(err, errLocked) {
		return nil, fmt.Errorf("%s is in use by another process (pid %d holds it: another checkout-server on the same directory?): stop that process, or use another directory",
			p, pidIn(filepath.Join(p, serverLockFile)))
	}
	if err != nil {
		return nil, fmt.Errorf("%s: cannot tell whether it is in use: %w", p, err)
	}
	heldDirs.Store(p, true)
	return func() {
		heldDirs.Delete(p)
		unlock()
	}, nil
}

var errLocked = errors.New("locked")

// pidIn is the pid a server wrote in its lock file, or -1.
func pidIn(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return -1
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err != nil {
		return -1
	}
	return pid
}
