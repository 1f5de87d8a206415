package envd_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/client"

	"github.com/ironclaw/ironclaw/internal/e2b/auth"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
)

type written struct {
	Name, Type, Path string
}

// do sends an envd /files request with hc and returns the status, the
// body and the headers.
func do(t *testing.T, hc *http.Client, method, u, ct string, body io.Reader, hdr ...string) (int, []byte, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b, res.Header
}

func filesURL(env *e2btest.Env, q url.Values) string { return env.BaseURL + "/files?" + q.Encode() }

// envdErr decodes envd's error body and checks its code is the status.
func envdErr(t *testing.T, status int, body []byte) string {
	t.Helper()
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Code != status || e.Message == "" {
		t.Fatalf("error body %s (status %d): %v", body, status, err)
	}
	return e.Message
}

func multipartBody(t *testing.T, files map[string]string, order []string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, name := range order {
		w, err := mw.CreateFormFile("file", name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, files[name])
	}
	mw.Close()
	return mw.FormDataContentType(), &buf
}

// Uploads as octet-stream (plain and gzip) and multipart (one file at
// ?path=, several at their part's file names) read back by GET.
func TestFilesUploadDownload(t *testing.T) {
	env, sb, _ := fsEnv(t)
	hc := env.EnvdHTTP(sb)

	st, body, _ := do(t, hc, "POST", filesURL(env, url.Values{"path": {"up/raw.txt"}, "username": {"user"}}), "application/octet-stream", strings.NewReader("raw bytes"))
	if st != http.StatusOK {
		t.Fatalf("octet-stream: %d %s", st, body)
	}
	var got []written
	if err := json.Unmarshal(body, &got); err != nil || len(got) != 1 || got[0] != (written{"raw.txt", "file", "/workspace/up/raw.txt"}) {
		t.Fatalf("octet-stream answer %s: %v", body, err)
	}
	st, body, hdr := do(t, hc, "GET", filesURL(env, url.Values{"path": {"/workspace/up/raw.txt"}}), "", nil)
	if st != http.StatusOK || string(body) != "raw bytes" {
		t.Fatalf("download: %d %q", st, body)
	}
	if hdr.Get("Content-Type") != "text/plain; charset=utf-8" || hdr.Get("Content-Disposition") != `inline; filename=raw.txt` {
		t.Fatalf("download headers: %v", hdr)
	}

	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "squeezed")
	zw.Close()
	st, body, _ = do(t, hc, "POST", filesURL(env, url.Values{"path": {"/tmp/z.bin"}}), "application/octet-stream", &gz, "Content-Encoding", "gzip")
	if st != http.StatusOK {
		t.Fatalf("gzip: %d %s", st, body)
	}
	if st, body, _ = do(t, hc, "GET", filesURL(env, url.Values{"path": {"/tmp/z.bin"}}), "", nil); string(body) != "squeezed" {
		t.Fatalf("gzip read back: %d %q", st, body)
	}

	ct, mp := multipartBody(t, map[string]string{"ignored-name": "one"}, []string{"ignored-name"})
	st, body, _ = do(t, hc, "POST", filesURL(env, url.Values{"path": {"/workspace/mp/one.txt"}}), ct, mp)
	if st != http.StatusOK {
		t.Fatalf("multipart: %d %s", st, body)
	}
	ct, mp = multipartBody(t, map[string]string{"/workspace/mp/a.txt": "A", "mp/b/b.txt": "B"}, []string{"/workspace/mp/a.txt", "mp/b/b.txt"})
	st, body, _ = do(t, hc, "POST", filesURL(env, nil), ct, mp)
	got = nil
	if err := json.Unmarshal(body, &got); st != http.StatusOK || err != nil || len(got) != 2 || got[1].Path != "/workspace/mp/b/b.txt" {
		t.Fatalf("multipart, two files: %d %s", st, body)
	}
	for p, want := range map[string]string{"/workspace/mp/one.txt": "one", "/workspace/mp/a.txt": "A", "/workspace/mp/b/b.txt": "B"} {
		if st, body, _ := do(t, hc, "GET", filesURL(env, url.Values{"path": {p}}), "", nil); st != 200 || string(body) != want {
			t.Fatalf("%s: %d %q", p, st, body)
		}
	}
	ct, mp = multipartBody(t, map[string]string{"/workspace/dup": "x"}, []string{"/workspace/dup", "/workspace/dup"})
	if st, body, _ = do(t, hc, "POST", filesURL(env, nil), ct, mp); st != http.StatusBadRequest {
		t.Fatalf("two parts, one path: %d %s", st, body)
	}
	envdErr(t, st, body)

	// An empty file is a 200 with no bytes.
	do(t, hc, "POST", filesURL(env, url.Values{"path": {"/workspace/empty"}}), "application/octet-stream", strings.NewReader(""))
	if st, body, _ = do(t, hc, "GET", filesURL(env, url.Values{"path": {"/workspace/empty"}}), "", nil); st != 200 || len(body) != 0 {
		t.Fatalf("empty: %d %q", st, body)
	}

	for _, c := range []struct {
		method string
		q      url.Values
		ct     string
		want   int
		hdr    []string
	}{
		{"GET", url.Values{"path": {"/workspace/missing"}}, "", http.StatusNotFound, nil},
		{"GET", url.Values{"path": {"/workspace/up"}}, "", http.StatusBadRequest, nil},
		{"GET", url.Values{"path": {"/etc/passwd"}}, "", http.StatusBadRequest, nil},
		{"GET", url.Values{"path": {"/workspace/up/raw.txt"}, "username": {"bob"}}, "", http.StatusUnauthorized, nil},
		{"POST", url.Values{"path": {"/etc/x"}}, "application/octet-stream", http.StatusBadRequest, nil},
		{"POST", url.Values{}, "application/octet-stream", http.StatusBadRequest, nil},
		{"POST", url.Values{"path": {"/workspace/x"}}, "text/plain", http.StatusBadRequest, nil},
		{"POST", url.Values{"path": {"/workspace/x"}}, "application/octet-stream", http.StatusBadRequest, []string{"X-Metadata-Owner", "me"}},
		{"POST", url.Values{"path": {"/workspace/x"}}, "application/octet-stream", http.StatusBadRequest, []string{"Content-Encoding", "br"}},
	} {
		st, body, _ := do(t, hc, c.method, filesURL(env, c.q), c.ct, strings.NewReader("x"), c.hdr...)
		if st != c.want {
			t.Fatalf("%s %v: %d %s, want %d", c.method, c.q, st, body, c.want)
		}
		envdErr(t, st, body)
	}
}

// A signed URL stands for the access token: right signature, right path
// and operation, not expired.
func TestFilesSignedURLs(t *testing.T) {
	env, sb, _ := fsEnv(t)
	anon := env.EnvdHTTP(e2btest.Sandbox{SandboxID: sb.SandboxID}) // routing headers, no token
	sign := func(p, op string, exp int64) url.Values {
		q := url.Values{"path": {p}, "username": {"user"}, "signature": {auth.Signature(p, op, "user", sb.EnvdAccessToken, exp)}}
		if exp != 0 {
			q.Set("signature_expiration", fmt.Sprint(exp))
		}
		return q
	}
	future := time.Now().Add(time.Hour).Unix()
	if st, body, _ := do(t, anon, "POST", filesURL(env, sign("/workspace/s.txt", "write", future)), "application/octet-stream", strings.NewReader("signed")); st != 200 {
		t.Fatalf("signed upload: %d %s", st, body)
	}
	if st, body, _ := do(t, anon, "GET", filesURL(env, sign("/workspace/s.txt", "read", 0)), "", nil); st != 200 || string(body) != "signed" {
		t.Fatalf("signed download: %d %q", st, body)
	}
	wrong := sign("/workspace/s.txt", "read", 0)
	wrong.Set("signature", auth.Signature("/workspace/s.txt", "read", "user", "not-the-token", 0))
	for name, c := range map[string]struct {
		method string
		q      url.Values
	}{
		"no signature":    {"GET", url.Values{"path": {"/workspace/s.txt"}}},
		"wrong signature": {"GET", wrong},
		"expired":         {"GET", sign("/workspace/s.txt", "read", time.Now().Add(-time.Minute).Unix())},
		"another path": {"GET", func() url.Values {
			q := sign("/workspace/other", "read", 0)
			q.Set("path", "/workspace/s.txt")
			return q
		}()},
		"read sig to write": {"POST", sign("/workspace/s.txt", "read", 0)},
	} {
		st, body, _ := do(t, anon, c.method, filesURL(env, c.q), "application/octet-stream", strings.NewReader("evil"))
		if st != http.StatusUnauthorized {
			t.Fatalf("%s: %d %s, want 401", name, st, body)
		}
	}
	var out strings.Builder
	if err := env.Agent.GetFile(context.Background(), sb.SandboxID, "/workspace/s.txt", &out); err != nil || out.String() != "signed" {
		t.Fatalf("after refused writes: %q %v", out.String(), err)
	}
}

// An upload over the native upload limit is 413 in envd's error body,
// and leaves the file as it was.
func TestFilesUploadTooLarge(t *testing.T) {
	env := e2btest.Start(t, func(c *e2btest.Config) { c.MaxUploadBytes = 1024 })
	sb := env.CreateNative(t, "agent.token", client.CreateRequest{})
	hc := env.EnvdHTTP(sb)
	q := url.Values{"path": {"/workspace/big"}}
	if st, body, _ := do(t, hc, "POST", filesURL(env, q), "application/octet-stream", strings.NewReader("small")); st != 200 {
		t.Fatalf("small: %d %s", st, body)
	}
	big := strings.Repeat("x", 4096)
	// Chunked (no Content-Length), as a streamed upload is.
	st, body, _ := do(t, hc, "POST", filesURL(env, q), "application/octet-stream", io.MultiReader(strings.NewReader(big)))
	if st != http.StatusRequestEntityTooLarge {
		t.Fatalf("octet-stream over the limit: %d %s", st, body)
	}
	envdErr(t, st, body)
	ct, mp := multipartBody(t, map[string]string{"/workspace/big": big}, []string{"/workspace/big"})
	st, body, _ = do(t, hc, "POST", filesURL(env, nil), ct, mp)
	if st != http.StatusRequestEntityTooLarge {
		t.Fatalf("multipart over the limit: %d %s", st, body)
	}
	envdErr(t, st, body)
	if st, body, _ := do(t, hc, "GET", filesURL(env, q), "", nil); string(body) != "small" {
		t.Fatalf("after: %d %q", st, body)
	}
}
