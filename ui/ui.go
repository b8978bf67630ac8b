// Package ui is the dashboard: one page of static HTML, CSS and JavaScript
// modules (static/), embedded in the binaries, with no build step and no
// third-party code. The page asks for an API key, keeps it in sessionStorage
// and reads the same JSON API as every other client, with
// Authorization: Bearer; it never has a server side of its own.
//
// The local server and the health Lambda (which API Gateway sends GET /,
// GET /ui/{proxy+} and every unmatched request, all without the authorizer)
// both serve it with With, so the page, its headers and its
// Content-Security-Policy are the same in both places:
//
//	GET /             the page
//	GET /ui/          the page
//	GET /ui/<file>    its scripts, style sheet and icon
//
// Every other path goes to the API's handler.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/errcode"
)

// Prefix is the path under which the dashboard's files are served.
const Prefix = "/ui/"

// CSP is the Content-Security-Policy of every dashboard response: scripts,
// styles, images and API calls from this origin only; no inline script or
// style, no eval, no frames, no plugins, no form posts, no other origin.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

//go:embed static
var static embed.FS

// file is one embedded file, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// files maps a request path below Prefix ("app.js") to its file; the page
// itself is "index.html".
var files = func() map[string]file {
	out := map[string]file{}
	err := fs.WalkDir(static, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := static.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		if ct == "" {
			ct = http.DetectContentType(b)
		}
		out[strings.TrimPrefix(p, "static/")] = file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		return nil
	})
	if err != nil {
		panic("ui: embedded files: " + err.Error())
	}
	return out
}()

// IsPath reports whether the dashboard serves p (any method): "/", "/ui" and
// everything under Prefix.
func IsPath(p string) bool {
	return p == "/" || p == "/ui" || strings.HasPrefix(p, Prefix)
}

// With serves the dashboard on its paths (see IsPath) and hands every other
// request to api.
func With(api http.Handler) http.Handler {
	h := Handler()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if IsPath(r.URL.Path) {
			h.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	})
}

// Handler serves the dashboard's paths only. Anything else it is given is
// 404 not_found; a method other than GET or HEAD is 405
// method_not_allowed, both in the API's error format.
func Handler() http.Handler {
	return http.HandlerFunc(serve)
}

func serve(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	if !IsPath(r.URL.Path) {
		fail(w, http.StatusNotFound, `{"error":"no such path","code":"`+errcode.NotFound+`"}`)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		h.Set("Allow", "GET, HEAD")
		fail(w, http.StatusMethodNotAllowed, `{"error":"the dashboard's files can only be read (GET or HEAD)","code":"`+errcode.MethodNotAllowed+`"}`)
		return
	}
	name := strings.TrimPrefix(r.URL.Path, Prefix)
	if r.URL.Path == "/" || r.URL.Path == "/ui" || name == "" {
		name = "index.html"
	}
	f, ok := files[name]
	if !ok || name != path.Clean(name) {
		fail(w, http.StatusNotFound, `{"error":"the dashboard has no such file","code":"`+errcode.NotFound+`"}`)
		return
	}
	h.Set("Content-Type", f.contentType)
	h.Set("ETag", f.etag)
	// Revalidated on every load, so a new deployment shows at once; an
	// unchanged file costs a 304.
	h.Set("Cache-Control", "no-cache")
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
}

func fail(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body + "\n"))
}
