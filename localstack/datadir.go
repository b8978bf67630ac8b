package localstack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
	for {
		pid, err := lockHolder(filepath.Join(p, "LOCK"))
		switch {
		case err != nil:
			return fmt.Errorf("%s: cannot tell whether it is in use: %w", p, err)
		case pid == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%s is in use by another process (pid %d holds its LOCK: another checkout-server or dynalite on the same directory?): stop that process, or use another directory", p, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lockLetGo is how long CheckDataDir waits for a process holding the
// directory's LOCK to let go of it before it refuses the directory.
const lockLetGo = 2 * time.Second
