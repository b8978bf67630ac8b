package mcpserver

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// Serve stopped by its ctx returned while a goroutine of its own was
// still reading its input: that goroutine lived on, blocked on the
// reader, and took the next line written to it from whoever read it
// next. Serve now closes its input when it returns, as the SDK's own
// transports close theirs.
func TestServeStoppedStopsReadingItsInput(t *testing.T) {
	t.Parallel()
	inR, inW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, client.New("http://127.0.0.1:1", "ck_test"), inR, io.Discard)
	}()
	if _, err := io.WriteString(inW, initLine+"\n"); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve stopped by its ctx: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return once its ctx was done")
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n")
		wrote <- err
	}()
	select {
	case err := <-wrote:
		if !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("a line written after Serve returned: %v, want io.ErrClosedPipe (nothing reads the input any more)", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("a line written after Serve returned was neither read nor refused")
	}
	inW.Close()
}
