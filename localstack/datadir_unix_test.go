//go:build unix

package localstack

import (
	"path/filepath"
	"syscall"
	"testing"
)

// A directory whose dynalite was just killed (SIGKILL: what the kernel
// sends a server's dynalite when the server itself is killed) is taken
// once the dying process lets go of its LOCK, which takes it some
// milliseconds: a server started again at once used to be refused, "in
// use by another process", naming the dead server's own dynalite.
func TestCheckDataDirWaitsForAKilledHolderToLetGo(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "db")
	first := start(t, Options{Path: path})
	createTable(t, first.Endpoint, "kept")
	if err := syscall.Kill(first.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := CheckDataDir(path); err != nil {
		t.Fatalf("CheckDataDir just after its dynalite was killed: %v", err)
	}
	second := start(t, Options{Path: path})
	if got := listTables(t, second.Endpoint); len(got) != 1 {
		t.Fatalf("after the first was killed: tables %v", got)
	}
}
