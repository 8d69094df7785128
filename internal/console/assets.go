package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"io/fs"
	"path"
	"strings"
)

//go:embed static/*
var staticFiles embed.FS

//go:embed templates/*.html
var templateFiles embed.FS

// checksumLen is how many hex digits of the SHA-256 go into an asset URL. Eight are plenty to
// tell versions of a handful of files apart; the full sum is the ETag.
const checksumLen = 8

// contentTypes lists the asset kinds the console ships. It is spelled out rather than taken from
// mime.TypeByExtension because that consults the host's mime.types, and a JavaScript file served
// as text/plain is refused by browsers once nosniff is set.
var contentTypes = map[string]string{
	".css":  "text/css; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
	".ico":  "image/x-icon",
	".json": "application/json",
}

// asset is one embedded static file, addressed by a name that contains its checksum.
type asset struct {
	data        []byte
	contentType string
	etag        string
}

// site is everything the console serves, prepared once: assets keyed by their checksummed file
// name, the URL of each source file, and the rendered index page.
type site struct {
	assets      map[string]asset  // "app.3f2a9c1b.js" → asset
	urls        map[string]string // "app.js" → "/static/app.3f2a9c1b.js"
	index       []byte
	indexETag   string
	console     []byte
	consoleETag string
}

// newSite loads the embedded assets, checksums them and renders the index template. It only
// fails on a defect in the embedded files, so callers may treat an error as a bug.
func newSite() (*site, error) {
	s := &site{assets: map[string]asset{}, urls: map[string]string{}}
	entries, err := fs.ReadDir(staticFiles, "static")
	if err != nil {
		return nil, fmt.Errorf("console: read static dir: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			return nil, fmt.Errorf("console: static/%s: subdirectories are not served", e.Name())
		}
		name := e.Name()
		ext := path.Ext(name)
		ctype, ok := contentTypes[ext]
		if !ok {
			return nil, fmt.Errorf("console: static/%s: no content type for %q", name, ext)
		}
		data, err := staticFiles.ReadFile("static/" + name)
		if err != nil {
			return nil, fmt.Errorf("console: read static/%s: %w", name, err)
		}
		sum := sha256.Sum256(data)
		full := hex.EncodeToString(sum[:])
		hashed := strings.TrimSuffix(name, ext) + "." + full[:checksumLen] + ext
		s.assets[hashed] = asset{data: data, contentType: ctype, etag: `"` + full + `"`}
		s.urls[name] = "/static/" + hashed
	}

	tmpl, err := template.New("").Funcs(template.FuncMap{"asset": s.assetURL}).
		ParseFS(templateFiles, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("console: parse templates: %w", err)
	}
	// The pages hold no per-request data (the chat's settings live in the URL fragment, the
	// console's key in session storage; neither reaches the server), so they are rendered once
	// here rather than on every request.
	if s.index, s.indexETag, err = render(tmpl, "index.html"); err != nil {
		return nil, err
	}
	if s.console, s.consoleETag, err = render(tmpl, "console.html"); err != nil {
		return nil, err
	}
	return s, nil
}

func render(tmpl *template.Template, name string) ([]byte, string, error) {
	var buf bytes.Buffer
	if err := tmpl.ExecuteTemplate(&buf, name, nil); err != nil {
		return nil, "", fmt.Errorf("console: render %s: %w", name, err)
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.Bytes(), `"` + hex.EncodeToString(sum[:]) + `"`, nil
}

// assetURL is the template function {{asset "app.js"}}: the checksummed URL of a source file.
// An unknown name is an error so that a typo fails the build's tests, not the browser.
func (s *site) assetURL(name string) (string, error) {
	u, ok := s.urls[name]
	if !ok {
		return "", fmt.Errorf("unknown asset %q", name)
	}
	return u, nil
}
