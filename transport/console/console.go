package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// assetVersion is replaced in index.html by a hash of the assets, so that
// a new binary's page asks for its own assets, which may then be cached.
const assetVersion = "{{version}}"

// contentTypes are the media types of the assets, fixed here rather than
// read from the host's MIME tables, which a scratch image does not have.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
}

// file is one asset, ready to serve.
type file struct {
	body        []byte
	contentType string
	etag        string
	cache       string
}

// handler serves the embedded files.
type handler struct {
	files map[string]file // by path below /ui/, "" for the page
}

// Handler returns the console's handler. It expects the request path with
// the /ui prefix removed ("/" for the page, "/app.js" for an asset) and
// answers GET and HEAD only.
func Handler() http.Handler {
	h, err := newHandler(static)
	if err != nil {
		// The files are compiled in: a failure is a broken build.
		panic(fmt.Sprintf("console: %v", err))
	}
	return h
}

func newHandler(fsys fs.FS) (*handler, error) {
	h := &handler{files: map[string]file{}}
	sum := sha256.New()
	raw := map[string][]byte{}
	err := fs.WalkDir(fsys, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(p, "static/")
		raw[name] = b
		sum.Write([]byte(name))
		sum.Write(b)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the embedded files: %w", err)
	}
	version := hex.EncodeToString(sum.Sum(nil))[:12]
	for name, b := range raw {
		f := file{body: b, contentType: contentTypes[path.Ext(name)],
			// Assets are asked for with ?v=version: a cached copy is the right one.
			cache: "public, max-age=31536000, immutable"}
		if name == "index.html" {
			name = ""
			f.body = bytes.ReplaceAll(b, []byte(assetVersion), []byte(version))
			f.cache = "no-cache" // revalidated with its ETag on every load
		}
		if f.contentType == "" {
			f.contentType = "application/octet-stream"
		}
		s := sha256.Sum256(f.body)
		f.etag = `"` + hex.EncodeToString(s[:8]) + `"`
		h.files[name] = f
	}
	if _, ok := h.files[""]; !ok {
		return nil, fmt.Errorf("no index.html among the embedded files")
	}
	return h, nil
}

// ServeHTTP serves the page at / and the assets by name.
func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	f, ok := h.files[strings.TrimPrefix(r.URL.Path, "/")]
	if !ok || r.URL.Path == "/index.html" {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	hd.Set("Content-Type", f.contentType)
	hd.Set("Cache-Control", f.cache)
	hd.Set("ETag", f.etag)
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
}
