package console

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func serve(t *testing.T, h http.Handler, method, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
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

func TestHandlerServesThePage(t *testing.T) {
	h := Handler()
	r := serve(t, h, http.MethodGet, "/")
	if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %q", r.StatusCode, r.Header.Get("Content-Type"))
	}
	page := body(t, r)
	if r.Header.Get("Cache-Control") != "no-cache" || r.Header.Get("ETag") == "" {
		t.Fatalf("the page must be revalidated: Cache-Control %q, ETag %q", r.Header.Get("Cache-Control"), r.Header.Get("ETag"))
	}
	if !strings.Contains(r.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Fatalf("CSP %q", r.Header.Get("Content-Security-Policy"))
	}
	// The page names its assets with the version of the build, and loads
	// nothing from another origin.
	if strings.Contains(page, assetVersion) {
		t.Fatal("the page still holds the version placeholder")
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#]+)"`).FindAllStringSubmatch(page, -1)
	if len(refs) < 2 {
		t.Fatalf("the page references %v", refs)
	}
	for _, ref := range refs {
		u := ref[1]
		if u == "data:," {
			continue
		}
		if strings.Contains(u, "//") {
			t.Fatalf("the page loads %s from elsewhere", u)
		}
		a := serve(t, h, http.MethodGet, "/"+u)
		if a.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d", u, a.StatusCode)
		}
	}
}

func TestHandlerAssets(t *testing.T) {
	h := Handler()
	for path, ct := range map[string]string{
		"/app.js":    "text/javascript; charset=utf-8",
		"/style.css": "text/css; charset=utf-8",
	} {
		r := serve(t, h, http.MethodGet, path+"?v=x")
		if r.StatusCode != http.StatusOK || r.Header.Get("Content-Type") != ct {
			t.Fatalf("%s: %d %q, want 200 %q", path, r.StatusCode, r.Header.Get("Content-Type"), ct)
		}
		if cc := r.Header.Get("Cache-Control"); !strings.Contains(cc, "max-age=31536000") || !strings.Contains(cc, "immutable") {
			t.Fatalf("%s: Cache-Control %q, want cached", path, cc)
		}
		if body(t, r) == "" {
			t.Fatalf("%s: empty", path)
		}
		again := serve(t, h, http.MethodGet, path, "If-None-Match", r.Header.Get("ETag"))
		if again.StatusCode != http.StatusNotModified {
			t.Fatalf("%s with its ETag: %d, want 304", path, again.StatusCode)
		}
	}
	for _, path := range []string{"/nope.js", "/index.html", "/static/app.js"} {
		if r := serve(t, h, http.MethodGet, path); r.StatusCode != http.StatusNotFound {
			t.Fatalf("%s: %d, want 404", path, r.StatusCode)
		}
	}
	if r := serve(t, h, http.MethodPost, "/"); r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %d, Allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
}
