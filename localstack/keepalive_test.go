package localstack

import (
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"
)

// The server keeps an idle connection open longer than clients keep
// theirs, so that a request is never sent on a connection the server is
// closing: the SDK would send it again, and the server would do (and
// bill) it twice. Node closed idle connections after 5 s.
func TestIdleConnectionsOutlastTheClients(t *testing.T) {
	t.Parallel()
	d := start(t, Options{IndexLag: -1})
	hc := &http.Client{Transport: &http.Transport{IdleConnTimeout: 90 * time.Second}}
	reused := func() bool {
		var got bool
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { got = i.Reused }})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.Endpoint, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
		req.Header.Set("Content-Type", "application/x-amz-json-1.0")
		res, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		return got
	}
	reused()
	time.Sleep(12 * time.Second) // past Node's default keep-alive timeout (5 s; it closed here between 6 and 12 s)
	if !reused() {
		t.Fatal("the server closed an idle connection within 12 s; clients keep theirs for 90 s")
	}
}
