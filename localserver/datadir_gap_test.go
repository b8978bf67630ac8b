package localserver

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A server keeps its CHECKOUT_DATA_DIR while its dynalite is being
// restarted: a second server started on that directory meanwhile (a
// second `make run`, between two crashes of a dynalite that keeps dying,
// when the restarts back off up to 5 s) is refused as "in use by another
// process", as it is while the dynalite runs. Nothing holds the directory
// in that gap (only dynalite's LevelDB LOCK says it is used), so the
// second server started on it, and the first then failed every restart
// ("in use by another process") and answered 503 for as long as the
// second one ran.
func TestDataDirStaysTakenWhileDynaliteRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var logs testenv.Buffer
	first, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DataDir: dir, RestartDelay: 4 * time.Second,
		SweepInterval: -1, StreamPollInterval: -1,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	kill(t, first) // the first server restarts it in 4 s

	second, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DataDir: dir, SweepInterval: -1, StreamPollInterval: -1})
	if err == nil {
		second.Close()
		t.Fatalf("a second server started on %s, which the first one uses (its dynalite is being restarted)", dir)
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("the second server was refused, but not as a directory in use: %v", err)
	}
}
