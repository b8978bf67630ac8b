package setup

import (
	"github.com/checkout-dev/checkout/deploy"

	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/ui"
)

// The health function serves the dashboard on its public routes (and on
// $default) exactly as the local server does: same status, headers that
// matter, Content-Security-Policy and bytes.
func TestDashboardOnTheLambdaPath(t *testing.T) {
	t.Parallel()
	health := HTTP(deploy.Health, nil, nil, Env{}, slog.New(slog.DiscardHandler))
	local := ui.With(httpapi.New(nil, httpapi.Options{}))

	public := map[string]bool{}
	for _, r := range deploy.Routes {
		if r.Dashboard() {
			if r.Access != deploy.Public || r.Function != deploy.Health {
				t.Errorf("dashboard route %s: function %s, access %v", r.Key(), r.Function, r.Access)
			}
			public[r.Key()] = true
		}
	}
	if !public["GET /"] || !public["GET /ui/{proxy+}"] {
		t.Fatalf("dashboard routes %v", public)
	}

	for _, c := range []struct{ method, path, routeKey string }{
		{"GET", "/", "GET /"},
		{"GET", "/ui/app.js", "GET /ui/{proxy+}"},
		{"GET", "/ui/style.css", "GET /ui/{proxy+}"},
		{"GET", "/ui/favicon.svg", "GET /ui/{proxy+}"},
		{"GET", "/ui/missing.js", "GET /ui/{proxy+}"},
		{"GET", "/ui/", "$default"},
		{"GET", "/ui", "$default"},
		{"POST", "/", "$default"},
	} {
		t.Run(c.method+" "+c.path+" answers on Lambda as the local server does", func(t *testing.T) {
			resp, err := health(context.Background(), events.APIGatewayV2HTTPRequest{
				Version: "2.0", RouteKey: c.routeKey, RawPath: c.path,
				Headers: map[string]string{"host": "abcdef1234.execute-api.us-east-1.amazonaws.com"},
				RequestContext: events.APIGatewayV2HTTPRequestContext{
					RouteKey: c.routeKey, Stage: "$default", RequestID: "req-ui",
					HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: c.method, Path: c.path},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			local.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
			want := rec.Result()

			got := resp.Body
			if resp.IsBase64Encoded {
				b, err := base64.StdEncoding.DecodeString(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				got = string(b)
			}
			if resp.StatusCode != want.StatusCode || got != rec.Body.String() {
				t.Errorf("%s %s: lambda %d %.60q, local %d %.60q", c.method, c.path, resp.StatusCode, got, want.StatusCode, rec.Body.String())
			}
			for _, k := range []string{"Content-Type", "Content-Security-Policy", "Etag", "Cache-Control", "Allow"} {
				if resp.Headers[k] != want.Header.Get(k) {
					t.Errorf("%s %s: %s lambda %q, local %q", c.method, c.path, k, resp.Headers[k], want.Header.Get(k))
				}
			}
			if resp.Headers["Content-Security-Policy"] != ui.CSP {
				t.Errorf("%s %s: no CSP", c.method, c.path)
			}
			if resp.StatusCode == http.StatusOK && resp.IsBase64Encoded {
				t.Errorf("%s %s: text sent base64 encoded", c.method, c.path)
			}
		})
	}
}
