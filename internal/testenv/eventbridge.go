package testenv

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"sync"
)

// EventBridge stands in for Amazon EventBridge's PutEvents, for an SDK
// client pointed at it (AWS_ENDPOINT_URL_EVENTBRIDGE): it keeps every
// entry, with each request's Authorization and X-Amz-Target headers, and
// accepts every entry.
type EventBridge struct {
	mu       sync.Mutex
	entries  []map[string]any
	requests []http.Header
}

func (b *EventBridge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var in struct{ Entries []map[string]any }
	body, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(body, &in)
	b.mu.Lock()
	b.entries = append(b.entries, in.Entries...)
	b.requests = append(b.requests, r.Header.Clone())
	b.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	out := map[string]any{"FailedEntryCount": 0, "Entries": []map[string]string{}}
	for i := range in.Entries {
		out["Entries"] = append(out["Entries"].([]map[string]string), map[string]string{"EventId": strconv.Itoa(i)})
	}
	_ = json.NewEncoder(w).Encode(out)
}

// Entries are the entries put so far, in order.
func (b *EventBridge) Entries() []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]map[string]any(nil), b.entries...)
}

// Requests are the headers of the requests made so far, in order.
func (b *EventBridge) Requests() []http.Header {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]http.Header(nil), b.requests...)
}
