package localserver

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// GET /api/queues answers odd query strings with a 400
// invalid_request, never a 5xx, and walks names at the longest length.
func TestQueuesAnswersOddQueriesWith400(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, FeedSettle: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	long := "q" + strings.Repeat(":", 127)
	for _, q := range []string{"a", long, "b"} {
		if code, m := call(t, "POST", base+"/api/tasks", admin, fmt.Sprintf(`{"title":"t","queue":%q}`, q)); code != 201 {
			t.Fatalf("create in %s: %d %v", q, code, m)
		}
	}
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for _, qs := range []string{
		"limit=", "cursor=", "limit=1e3", "limit=%20", "limit=+5", "limit=5.0", "limit=99999999999999999999",
		"cursor=%00", "cursor=" + enc("q:"), "cursor=" + enc("q:"+strings.Repeat("a", 129)), "cursor=" + enc("q:a") + "==",
		"cursor=" + enc("x:a"), "cursor=" + strings.Repeat("A", 4097), "cursor=" + enc("q:a#b"), "cursor=" + enc("q:"+long),
		"limit=2&cursor=" + enc("q:zzzz"), "=", "&&", "cursor", "limit", "limit=1&limit=1", "cursor=a;b", "x=%zz",
	} {
		code, m := call(t, "GET", base+"/api/queues?"+qs, admin, "")
		if code >= 500 || code != 200 && (code != 400 || m["code"] != "invalid_request") {
			t.Errorf("%s: %d %v", qs, code, m)
		}
	}
	// A walk of pages of 1 through the longest name.
	var got []string
	for next := "/api/queues?limit=1"; ; {
		code, m := call(t, "GET", base+next, admin, "")
		if code != 200 {
			t.Fatalf("%s: %d %v", next, code, m)
		}
		for _, q := range m["queues"].([]any) {
			got = append(got, q.(map[string]any)["queue"].(string))
		}
		c, _ := m["next_cursor"].(string)
		if c == "" {
			break
		}
		next = "/api/queues?limit=1&cursor=" + c
	}
	if want := []string{"a", "b", long}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("walk %q, want %q", got, want)
	}
}
