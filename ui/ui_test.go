package ui

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, h http.Handler, method, target string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServesThePageAndItsFiles(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(299) })
	h := With(api)
	index := string(files["index.html"].body)
	for _, c := range []struct {
		method, path string
		status       int
		contentType  string
		body         string
	}{
		{"GET", "/", 200, "text/html; charset=utf-8", index},
		{"GET", "/ui/", 200, "text/html; charset=utf-8", index},
		{"GET", "/ui", 200, "text/html; charset=utf-8", index},
		{"GET", "/ui/index.html", 200, "text/html; charset=utf-8", index},
		{"HEAD", "/", 200, "text/html; charset=utf-8", ""},
		{"GET", "/ui/app.js", 200, "text/javascript; charset=utf-8", string(files["app.js"].body)},
		{"GET", "/ui/style.css", 200, "text/css; charset=utf-8", string(files["style.css"].body)},
		{"GET", "/ui/favicon.svg", 200, "image/svg+xml", string(files["favicon.svg"].body)},
		{"GET", "/ui/nope.js", 404, "application/json", `{"error":"the dashboard has no such file","code":"not_found"}` + "\n"},
		{"GET", "/ui/../ui/app.js", 404, "application/json", ""},
		{"GET", "/ui/static/app.js", 404, "application/json", ""},
		{"POST", "/", 405, "application/json", ""},
		{"DELETE", "/ui/app.js", 405, "application/json", ""},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			resp := get(t, h, c.method, c.path)
			got := body(t, resp)
			if resp.StatusCode != c.status || resp.Header.Get("Content-Type") != c.contentType {
				t.Errorf("%s %s: %d %q, want %d %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Content-Type"), c.status, c.contentType)
			}
			if c.body != "" && got != c.body {
				t.Errorf("%s %s: body %.80q", c.method, c.path, got)
			}
			if resp.Header.Get("Content-Security-Policy") != CSP {
				t.Errorf("%s %s: CSP %q", c.method, c.path, resp.Header.Get("Content-Security-Policy"))
			}
			if resp.Header.Get("X-Content-Type-Options") != "nosniff" || resp.Header.Get("X-Frame-Options") != "DENY" {
				t.Errorf("%s %s: headers %v", c.method, c.path, resp.Header)
			}
			if c.status == 405 && resp.Header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: Allow %q", c.method, c.path, resp.Header.Get("Allow"))
			}
		})
	}
	// Everything else is the API's.
	for _, p := range []string{"/healthz", "/api/tasks", "/uix", "/index.html", "/favicon.ico"} {
		if resp := get(t, h, "GET", p); resp.StatusCode != 299 {
			t.Errorf("GET %s: %d, want the API's handler", p, resp.StatusCode)
		}
	}
}

func TestRevalidatesWithETag(t *testing.T) {
	t.Parallel()
	h := Handler()
	first := get(t, h, "GET", "/ui/app.js")
	etag := first.Header.Get("ETag")
	if etag == "" || first.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, first.Header.Get("Cache-Control"))
	}
	if again := get(t, h, "GET", "/ui/app.js", "If-None-Match", etag); again.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", again.StatusCode)
	}
}

// The policy forbids inline script, eval and every other origin.
func TestPolicy(t *testing.T) {
	t.Parallel()
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'", "frame-ancestors 'none'", "base-uri 'none'"} {
		if !strings.Contains(CSP, want) {
			t.Errorf("CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "*", "http:", "https:", "data:"} {
		if strings.Contains(CSP, bad) {
			t.Errorf("CSP allows %q", bad)
		}
	}
}

// The files keep to what the policy allows, and never parse strings as
// HTML: every untrusted string reaches the page as text.
func TestFilesKeepToThePolicy(t *testing.T) {
	t.Parallel()
	html := string(files["index.html"].body)
	if m := regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>`).FindAllString(html, -1); len(m) != 1 || !strings.Contains(m[0], `src="/ui/app.js"`) || !strings.Contains(m[0], `type="module"`) {
		t.Errorf("scripts in index.html: %q, want the one module /ui/app.js", m)
	}
	for _, re := range []string{`(?i)\son[a-z]+\s*=`, `(?i)\sstyle\s*=`, `(?i)<style`, `(?i)javascript:`, `(?i)(src|href)="(https?:)?//`} {
		if m := regexp.MustCompile(re).FindString(html); m != "" {
			t.Errorf("index.html has %q, which the policy forbids", m)
		}
	}
	// Every file the page links to exists.
	for _, m := range regexp.MustCompile(`(?:src|href)="/ui/([^"]+)"`).FindAllStringSubmatch(html, -1) {
		if _, ok := files[m[1]]; !ok {
			t.Errorf("index.html links to /ui/%s, which is not embedded", m[1])
		}
	}
	scripts := 0
	for name, f := range files {
		if !strings.HasSuffix(name, ".js") {
			continue
		}
		scripts++
		src := string(f.body)
		for _, re := range []string{`\.innerHTML\b`, `\.outerHTML\b`, `insertAdjacentHTML`, `document\.write`, `\beval\(`, `new Function\(`, `setAttribute\(\s*['"]style`, `localStorage`, `document\.cookie`, `https?://`} {
			if m := regexp.MustCompile(re).FindString(src); m != "" {
				t.Errorf("%s uses %q", name, m)
			}
		}
		// Every module it imports is embedded.
		for _, m := range regexp.MustCompile(`(?m)^import .* from '\./([^']+)';$`).FindAllStringSubmatch(src, -1) {
			if _, ok := files[m[1]]; !ok {
				t.Errorf("%s imports ./%s, which is not embedded", name, m[1])
			}
		}
	}
	if scripts < 5 {
		t.Errorf("only %d scripts embedded", scripts)
	}
}

// Every view the navigation links to has its section and heading in the
// page and is registered in app.js.
func TestEveryViewHasItsSection(t *testing.T) {
	t.Parallel()
	html := string(files["index.html"].body)
	app := string(files["app.js"].body)
	m := regexp.MustCompile(`const views = \{([^}]*)\}`).FindStringSubmatch(app)
	if m == nil {
		t.Fatal("app.js has no views table")
	}
	registered := map[string]bool{}
	for _, name := range strings.Split(m[1], ",") {
		registered[strings.TrimSpace(name)] = true
	}
	links := regexp.MustCompile(`<a href="#/([a-z]+)" data-view="([a-z]+)"`).FindAllStringSubmatch(html, -1)
	if len(links) < 5 {
		t.Fatalf("only %d views in the navigation", len(links))
	}
	for _, l := range links {
		name := l[2]
		if l[1] != name {
			t.Errorf("nav link #/%s is marked as view %s", l[1], name)
		}
		for _, id := range []string{"view-" + name, name + "-h"} {
			if !strings.Contains(html, `id="`+id+`"`) {
				t.Errorf("view %s: index.html has no #%s", name, id)
			}
		}
		if !registered[name] {
			t.Errorf("view %s is not in app.js's views", name)
		}
	}
}

// The work graph's statuses (API 1.1) are listed, in the API's order, and
// the queues view has a column for each.
func TestEveryStatusIsShown(t *testing.T) {
	t.Parallel()
	format := string(files["format.js"].body)
	if !strings.Contains(format, `export const STATUSES = ['todo', 'blocked', 'in_progress', 'done', 'cancelled', 'failed'];`) {
		t.Error("format.js does not list the six statuses in the API's order")
	}
	html := string(files["index.html"].body)
	if !strings.Contains(html, `<th scope="col">Queue</th><th scope="col">To do</th><th scope="col">Blocked</th><th scope="col">In progress</th>`) ||
		!strings.Contains(html, `<th scope="col">Cancelled</th><th scope="col">Failed</th>`) {
		t.Error("the queues view lacks a column per status")
	}
}
