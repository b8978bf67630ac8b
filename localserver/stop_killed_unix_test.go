//go:build unix

package localserver

import (
	"context"
	"log/slog"
	"strings"
	"syscall"
	"testing"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A dynalite that does not stop on SIGTERM is killed 5 s later, and the
// log says so: Close used to log "dynalite stopped" as after a clean stop,
// so nothing told a hung dynalite (whose data on disk may then want
// looking at) from one that ended as asked.
func TestCloseLogsADynaliteItHadToKill(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", TablePrefix: testenv.Prefix(), AdminKey: "ck_close-kills-a-hung-dynalite",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d := srv.Dynalite()
	// Stopped, it hears SIGTERM only once continued: it hangs as far as
	// Close can tell, until SIGKILL, which a stopped process cannot ignore.
	if err := syscall.Kill(d.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	out := logs.String()
	if strings.Contains(out, `"msg":"dynalite stopped"`) {
		t.Errorf("a dynalite killed after SIGTERM went unheeded is logged as stopped:\n%s", out)
	}
	if !strings.Contains(out, "killed") || !strings.Contains(out, `"level":"WARN"`) {
		t.Errorf("no warning that dynalite was killed:\n%s", out)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("dynalite still runs after Close")
	}
}
