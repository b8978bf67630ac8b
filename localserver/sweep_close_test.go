package localserver

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// lockedBuf is a log buffer the server's goroutines write at once.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuf) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

// A Close right after Start stops the start-up sweep on its way: that is
// no failure, and nothing is logged as one.
func TestACloseRightAfterStartLogsNoSweepFailure(t *testing.T) {
	for i := 0; i < 5; i++ {
		var buf lockedBuf
		log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(), SweepInterval: time.Hour, Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		srv.Close()
		if s := buf.String(); strings.Contains(s, "sweep") {
			t.Errorf("run %d: a Close right after Start logged:\n%s", i, s)
		}
	}
}
