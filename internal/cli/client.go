package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// defaultURL is where the operator commands look for a server when neither
// --url nor AGENTPLANE_URL says (the default of AGENTPLANE_ADDR).
const defaultURL = "http://127.0.0.1:8080"

// apiClient is what every operator command shares: the server, the key,
// the output format. It speaks only the public HTTP API (docs/API.md),
// exactly as any script would.
type apiClient struct {
	base    string
	key     string
	json    bool
	out     io.Writer
	errOut  io.Writer
	http    *http.Client
	getenv  func(string) string
	command string // "sessions list", for messages
}

// newFlags makes the flag set of a command with the flags every command
// takes: --url, --key and --json, defaulting from the environment.
func newFlags(c *apiClient, name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(c.errOut)
	url := c.getenv("AGENTPLANE_URL")
	if url == "" {
		url = defaultURL
	}
	key := c.getenv("AGENTPLANE_KEY")
	if key == "" {
		key = c.getenv("AGENTPLANE_ADMIN_KEY")
	}
	fs.StringVar(&c.base, "url", url, "the server (env AGENTPLANE_URL)")
	fs.StringVar(&c.key, "key", key, "the API key sent as a bearer token (env AGENTPLANE_KEY, else AGENTPLANE_ADMIN_KEY)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of text")
	c.command = name
	return fs
}

// parse parses args, letting flags come before and after the positional
// arguments ("sessions tail SES --json"), and returns the positionals.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError(err.Error()) // flag printed the flags
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// apiError is an error answer of the server.
type apiError struct {
	Status  int
	Code    string
	Message string
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message)
	}
	return fmt.Sprintf("%s (HTTP %d): %s", e.Code, e.Status, e.Message)
}

// do sends a request with the key and decodes a JSON answer into out (when
// non-nil). A non-2xx answer is an *apiError.
func (c *apiClient) do(ctx context.Context, method, path string, body any, out any) error {
	if c.key == "" {
		return errors.New("no API key: pass --key or set AGENTPLANE_KEY (or AGENTPLANE_ADMIN_KEY)")
	}
	var rd io.Reader
	if body != nil {
		if raw, ok := body.(json.RawMessage); ok {
			rd = bytes.NewReader(raw)
		} else {
			b, err := json.Marshal(body)
			if err != nil {
				return err
			}
			rd = bytes.NewReader(b)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.base, "/")+path, rd)
	if err != nil {
		return fmt.Errorf("%s: %w", c.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return decodeError(resp.StatusCode, raw)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: the answer is not JSON: %w", method, path, err)
	}
	return nil
}

func decodeError(status int, raw []byte) error {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
		return &apiError{Status: status, Code: e.Error.Code, Message: e.Error.Message}
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return &apiError{Status: status, Message: msg}
}

// listPages GETs path (with query q) page by page, appending the items of
// field to items, until limit items (0 = every page) or the last page.
func (c *apiClient) listPages(ctx context.Context, path string, q url.Values, field string, limit int) ([]json.RawMessage, error) {
	var items []json.RawMessage
	page := 100
	if limit > 0 && limit < page {
		page = limit
	}
	for {
		q.Set("limit", fmt.Sprint(page))
		var body map[string]json.RawMessage
		if err := c.do(ctx, "GET", path+"?"+q.Encode(), nil, &body); err != nil {
			return nil, err
		}
		var got []json.RawMessage
		if err := json.Unmarshal(body[field], &got); err != nil {
			return nil, fmt.Errorf("GET %s: no %s list in the answer", path, field)
		}
		items = append(items, got...)
		if limit > 0 && len(items) >= limit {
			return items[:limit], nil
		}
		var next string
		_ = json.Unmarshal(body["next_cursor"], &next)
		if next == "" {
			return items, nil
		}
		q.Set("cursor", next)
	}
}

// printJSON writes v indented.
func (c *apiClient) printJSON(v any) error {
	enc := json.NewEncoder(c.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newClient is an apiClient writing to stdout and stderr.
func newClient(stdout, stderr io.Writer) *apiClient {
	return &apiClient{out: stdout, errOut: stderr, http: &http.Client{}, getenv: os.Getenv}
}

// when formats a timestamp of the API (ms) for a table.
func when(ms int64) string {
	if ms <= 0 {
		return "-"
	}
	return time.UnixMilli(ms).Local().Format("2006-01-02 15:04:05")
}

// duration formats the span between two timestamps (ms); "-" while open.
func duration(from, to int64) string {
	if from <= 0 || to <= 0 {
		return "-"
	}
	return (time.Duration(to-from) * time.Millisecond).String()
}

// timeFlag reads a --since/--until value: RFC 3339, ms since the epoch,
// or a duration before now ("24h").
func timeFlag(v string, now time.Time) (string, error) {
	if v == "" {
		return "", nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return fmt.Sprint(now.Add(-d).UnixMilli()), nil
	}
	if _, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return v, nil
	}
	var ms int64
	if _, err := fmt.Sscan(v, &ms); err == nil && ms >= 0 {
		return v, nil
	}
	return "", fmt.Errorf("%q is not a time (RFC 3339, milliseconds since the epoch, or a duration before now such as 24h)", v)
}
