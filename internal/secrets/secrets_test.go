package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/audittest"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

const testValue = "ghp_REALVALUE_0123456789abcdef"

type kit struct {
	dir, keyFile string
	key          *Key
	log          *audit.Log
	st           *Store
}

func newKit(t testing.TB) *kit {
	t.Helper()
	root := t.TempDir()
	k := &kit{dir: filepath.Join(root, "data"), keyFile: filepath.Join(root, "conf", "secrets.key")}
	if err := os.MkdirAll(k.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	key, created, err := EnsureKey(k.keyFile)
	if err != nil || !created {
		t.Fatalf("EnsureKey = %v, %v", created, err)
	}
	k.key = key
	_, k.log = audittest.Open(t)
	k.reopen(t)
	return k
}

func (k *kit) reopen(t testing.TB) {
	t.Helper()
	st, err := Open(filepath.Join(k.dir, FileName), k.key, Options{Audit: k.log})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	k.st = st
}

func (k *kit) set(t *testing.T, m Meta, v string) Meta {
	t.Helper()
	got, err := k.st.Set(context.Background(), "operator", m, []byte(v))
	if err != nil {
		t.Fatalf("Set(%s) = %v", m.Name, err)
	}
	return got
}

func records(t testing.TB, l *audit.Log) []audit.Record {
	t.Helper()
	recs, err := l.Tail(context.Background(), 0, 10000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestSetListRotateRemovePersist(t *testing.T) {
	k := newKit(t)
	m := k.set(t, Meta{Name: "github", Hosts: []string{"API.github.com", "api.github.com"}}, testValue)
	want := Meta{Name: "github", Hosts: []string{"api.github.com"}, Env: "GITHUB", Header: "Authorization", Format: "Bearer {value}", Grant: GrantAsk, Source: SourceAPI, Version: 1}
	m.UpdatedAt = time.Time{}
	if !equalMeta(m, want) {
		t.Fatalf("Set = %+v, want %+v", m, want)
	}
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Env: "GITHUB_TOKEN", Grant: GrantAll}, "rotated-value")
	k.set(t, Meta{Name: "npm", Hosts: []string{"registry.npmjs.org"}}, "npm-value")
	k.reopen(t)
	list := k.st.List()
	if len(list) != 2 || list[0].Name != "github" || list[0].Version != 2 || list[0].Env != "GITHUB_TOKEN" || list[1].Name != "npm" {
		t.Fatalf("List after reopen = %+v", list)
	}
	r, _ := k.st.current("github")
	v, err := k.st.value(r)
	if err != nil || string(v) != "rotated-value" {
		t.Fatalf("value after reopen = %q, %v", v, err)
	}
	if err := k.st.Remove(context.Background(), "operator", "npm"); err != nil {
		t.Fatal(err)
	}
	if err := k.st.Remove(context.Background(), "operator", "npm"); !errors.Is(err, ErrNotFound) || !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second Remove = %v, want ErrNotFound", err)
	}
	k.reopen(t)
	if list := k.st.List(); len(list) != 1 {
		t.Fatalf("List after remove = %+v", list)
	}
	st, err := os.Stat(filepath.Join(k.dir, FileName))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("file mode = %v, %v", st.Mode(), err)
	}
	kinds := map[string]int{}
	for _, rec := range records(t, k.log) {
		kinds[rec.Kind]++
	}
	if kinds[KindSet+audit.IntentSuffix] != 3 || kinds[KindSet] != 3 || kinds[KindRemove+audit.IntentSuffix] != 1 || kinds[KindRemove] != 1 {
		t.Fatalf("audit kinds = %v", kinds)
	}
}

func equalMeta(a, b Meta) bool {
	return a.Name == b.Name && strings.Join(a.Hosts, ",") == strings.Join(b.Hosts, ",") && a.Env == b.Env && a.Header == b.Header &&
		a.Format == b.Format && a.Grant == b.Grant && a.Source == b.Source && a.Version == b.Version
}

// The value is nowhere at rest: not in the file, not in the audit log's
// database, not in any error.
func TestHostileSecretsValueNeverAtRest(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}}, testValue)
	_, err := k.st.Set(context.Background(), "operator", Meta{Name: "github", Hosts: []string{"bad host!"}}, []byte(testValue))
	if err == nil || strings.Contains(err.Error(), testValue) {
		t.Fatalf("bad Set = %v", err)
	}
	b, err := os.ReadFile(filepath.Join(k.dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(b, []byte(testValue)) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString([]byte(testValue)))) {
		t.Fatal("the value is in the secrets file")
	}
	for _, rec := range records(t, k.log) {
		if bytes.Contains(rec.Data, []byte(testValue)) {
			t.Fatalf("the value is in audit record %s %s", rec.Kind, rec.Data)
		}
	}
}

// A file edited to send the value elsewhere, sealed under another key,
// or damaged, is refused at Open with the old file intact.
func TestHostileSecretsFileTampering(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}}, testValue)
	path := filepath.Join(k.dir, FileName)
	orig, _ := os.ReadFile(path)
	cases := map[string][]byte{
		"hosts edited": bytes.Replace(orig, []byte(`api.github.com`), []byte(`evil.example.com`), 1),
		"grant edited": bytes.Replace(orig, []byte(`\"grant\":\"ask\"`), []byte(`\"grant\":\"all\"`), 1),
		"cut":          orig[:len(orig)/2],
		"empty":        {},
	}
	if bytes.Equal(cases["grant edited"], orig) {
		cases["grant edited"] = bytes.Replace(orig, []byte(`"grant":"ask"`), []byte(`"grant":"all"`), 1)
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			if bytes.Equal(b, orig) {
				t.Fatal("the edit changed nothing")
			}
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Open(path, k.key, Options{Audit: k.log}); err == nil {
				t.Fatal("Open accepted a tampered file")
			}
		})
	}
	other, _ := NewKey(bytes.Repeat([]byte{7}, KeySize))
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, other, Options{}); !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), k.key.ID()) {
		t.Fatalf("Open with another key = %v, want ErrKey naming the file's key", err)
	}
}

func TestHostileSecretsKeyCustody(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "k")
	if err := os.WriteFile(p, []byte(strings.Repeat("ab", KeySize)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(p); !errors.Is(err, ErrKey) {
		t.Fatalf("LoadKey(0644) = %v", err)
	}
	_ = os.Chmod(p, 0o600)
	if _, err := LoadKey(p); err != nil {
		t.Fatalf("LoadKey(0600) = %v", err)
	}
	link := filepath.Join(dir, "link")
	_ = os.Symlink(p, link)
	if _, err := LoadKey(link); !errors.Is(err, ErrKey) {
		t.Fatalf("LoadKey(symlink) = %v", err)
	}
	short := filepath.Join(dir, "short")
	_ = os.WriteFile(short, []byte("abcd\n"), 0o600)
	if _, err := LoadKey(short); !errors.Is(err, ErrKey) {
		t.Fatalf("LoadKey(short) = %v", err)
	}
	if err := os.Mkdir(filepath.Join(dir, "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKey(filepath.Join(dir, "d")); !errors.Is(err, ErrKey) {
		t.Fatalf("LoadKey(dir) = %v", err)
	}
	k1, c1, err := EnsureKey(filepath.Join(dir, "new", "secrets.key"))
	k2, c2, err2 := EnsureKey(filepath.Join(dir, "new", "secrets.key"))
	if err != nil || err2 != nil || !c1 || c2 || k1.ID() != k2.ID() {
		t.Fatalf("EnsureKey twice = %v %v %v %v", c1, c2, err, err2)
	}
}

// Bad input gets a clear error and changes nothing.
func TestHostileSecretsBadInput(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "keep", Hosts: []string{"api.example.com"}}, "v1")
	many := make([]string, MaxHosts+1)
	for i := range many {
		many[i] = "h" + strings.Repeat("x", i+1) + ".example.com"
	}
	cases := []struct {
		name string
		m    Meta
		v    []byte
	}{
		{"bad name", Meta{Name: "Bad Name", Hosts: []string{"a.com"}}, []byte("v")},
		{"long name", Meta{Name: strings.Repeat("a", 65), Hosts: []string{"a.com"}}, []byte("v")},
		{"no hosts", Meta{Name: "x"}, []byte("v")},
		{"too many hosts", Meta{Name: "x", Hosts: many}, []byte("v")},
		{"url host", Meta{Name: "x", Hosts: []string{"https://a.com/"}}, []byte("v")},
		{"reserved env", Meta{Name: "x", Hosts: []string{"a.com"}, Env: "HTTPS_PROXY"}, []byte("v")},
		{"reserved env prefix", Meta{Name: "x", Hosts: []string{"a.com"}, Env: "LD_PRELOAD"}, []byte("v")},
		{"bad env", Meta{Name: "x", Hosts: []string{"a.com"}, Env: "A-B"}, []byte("v")},
		{"bad header", Meta{Name: "x", Hosts: []string{"a.com"}, Header: "X: y"}, []byte("v")},
		{"reserved header", Meta{Name: "x", Hosts: []string{"a.com"}, Header: "Host"}, []byte("v")},
		{"format without mark", Meta{Name: "x", Hosts: []string{"a.com"}, Format: "Bearer"}, []byte("v")},
		{"format twice", Meta{Name: "x", Hosts: []string{"a.com"}, Format: "{value}{value}"}, []byte("v")},
		{"format crlf", Meta{Name: "x", Hosts: []string{"a.com"}, Format: "{value}\r\nX-Evil: 1"}, []byte("v")},
		{"bad grant", Meta{Name: "x", Hosts: []string{"a.com"}, Grant: "always"}, []byte("v")},
		{"empty value", Meta{Name: "x", Hosts: []string{"a.com"}}, nil},
		{"huge value", Meta{Name: "x", Hosts: []string{"a.com"}}, bytes.Repeat([]byte("a"), MaxValueBytes+1)},
		{"crlf value", Meta{Name: "x", Hosts: []string{"a.com"}}, []byte("v\r\nX-Evil: 1")},
		{"newline value", Meta{Name: "keep", Hosts: []string{"a.com"}}, []byte("v\n")},
		{"nul value", Meta{Name: "x", Hosts: []string{"a.com"}}, []byte("v\x00")},
	}
	path := filepath.Join(k.dir, FileName)
	before, _ := os.ReadFile(path)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := k.st.Set(context.Background(), "operator", c.m, c.v)
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Set = %v, want ErrInvalid", err)
			}
		})
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Fatal("a refused Set changed the file")
	}
	if l := k.st.List(); len(l) != 1 || l[0].Version != 1 {
		t.Fatalf("List = %+v", l)
	}
}

func TestHostileSecretsCountBound(t *testing.T) {
	k := newKit(t)
	for i := 0; i < MaxSecrets; i++ {
		if err := k.st.AddPolicy(Meta{Name: fmt.Sprintf("p%03d", i), Hosts: []string{"a.com"}}, []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := k.st.Set(context.Background(), "operator", Meta{Name: "one-more", Hosts: []string{"a.com"}}, []byte("v")); !errors.Is(err, ErrTooMany) {
		t.Fatalf("Set past MaxSecrets = %v", err)
	}
}

func TestPolicySecretsReadOnly(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "shadowed", Hosts: []string{"api.example.com"}}, "api-value")
	if err := k.st.AddPolicy(Meta{Name: "shadowed", Hosts: []string{"policy.example.com"}, Grant: GrantAll}, []byte("policy-value")); err != nil {
		t.Fatal(err)
	}
	m, err := k.st.Get("shadowed")
	if err != nil || m.Source != SourcePolicy || m.Hosts[0] != "policy.example.com" {
		t.Fatalf("Get = %+v, %v", m, err)
	}
	if _, err := k.st.Set(context.Background(), "operator", Meta{Name: "shadowed", Hosts: []string{"a.com"}}, []byte("v")); !errors.Is(err, ErrReadOnly) || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("Set(policy secret) = %v, want ErrReadOnly", err)
	}
	if err := k.st.Remove(context.Background(), "operator", "shadowed"); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Remove(policy secret) = %v, want ErrReadOnly", err)
	}
	// A write of another secret keeps the shadowed API secret in the file.
	k.set(t, Meta{Name: "other", Hosts: []string{"a.com"}}, "v")
	k.reopen(t)
	if m, err := k.st.Get("shadowed"); err != nil || m.Source != SourceAPI {
		t.Fatalf("after restart without the policy: %+v, %v", m, err)
	}
}

// fakeAsker stands in for the gateway.
type fakeAsker struct {
	mu        sync.Mutex
	asked     []string
	decide    map[string]chan bool
	failWith  error
	failAfter int // fail with failWith after this many asks
	withdrawn []string
}

func (f *fakeAsker) Withdraw(_ context.Context, sandbox string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.withdrawn = append(f.withdrawn, sandbox)
}

func (f *fakeAsker) Ask(_ context.Context, sandbox, principal string, m Meta) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil && len(f.asked) >= f.failAfter {
		return "", f.failWith
	}
	id := "ap-" + sandbox + "-" + m.Name
	f.asked = append(f.asked, id)
	if f.decide == nil {
		f.decide = map[string]chan bool{}
	}
	f.decide[id] = make(chan bool, 1)
	return id, nil
}

func (f *fakeAsker) Wait(ctx context.Context, id string) (bool, string, error) {
	f.mu.Lock()
	ch := f.decide[id]
	f.mu.Unlock()
	select {
	case ok := <-ch:
		ch <- ok // later waiters see it too
		if !ok {
			return false, "denied by test", nil
		}
		return true, "", nil
	case <-ctx.Done():
		return false, "", ctx.Err()
	}
}

func (f *fakeAsker) answer(id string, ok bool) {
	f.mu.Lock()
	ch := f.decide[id]
	f.mu.Unlock()
	ch <- ok
}

func newGrants(t *testing.T, k *kit, a Asker) *Grants {
	t.Helper()
	g, err := NewGrants(GrantsOptions{Store: k.st, Audit: k.log, Asker: a})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

func TestSwapGrantAll(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Env: "GITHUB_TOKEN", Grant: GrantAll}, testValue)
	k.set(t, Meta{Name: "custom", Hosts: []string{"*.example.com:443"}, Header: "X-Api-Key", Format: "{value}", Grant: GrantAll}, "custom-value")
	g := newGrants(t, k, nil)
	env, err := g.Attach(context.Background(), "sb1", "agent", []string{"github", "custom"})
	if err != nil {
		t.Fatal(err)
	}
	ph := envValue(env, "GITHUB_TOKEN")
	cph := envValue(env, "CUSTOM")
	if !strings.HasPrefix(ph, PlaceholderPrefix+"github-") || len(ph) != len(PlaceholderPrefix+"github-")+32 || strings.Contains(strings.Join(env, " "), testValue) {
		t.Fatalf("env = %v", env)
	}
	if !g.Intercept("sb1", "api.github.com", 443) || !g.Intercept("sb1", "x.example.com", 443) || g.Intercept("sb1", "x.example.com", 80) ||
		g.Intercept("sb1", "other.com", 443) || g.Intercept("sb2", "api.github.com", 443) {
		t.Fatal("Intercept answers wrong")
	}
	if !g.Contains("sb1", []byte("GET /?t="+ph)) || g.Contains("sb2", []byte(ph)) || g.Contains("sb1", []byte("nothing")) {
		t.Fatal("Contains answers wrong")
	}
	for _, c := range []struct{ header, in, want string }{
		{"Authorization", ph, "Bearer " + testValue},
		{"Authorization", "token " + ph, "token " + testValue},
		{"Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+ph)), "Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+testValue))},
		{"X-Other", "a " + ph + " b", "a " + testValue + " b"},
		{"X-None", "untouched", "untouched"},
	} {
		h := http.Header{}
		h.Set(c.header, c.in)
		names, err := g.Swap(context.Background(), "sb1", "api.github.com", 443, h)
		if err != nil || (c.in != "untouched" && (len(names) != 1 || names[0] != "github")) {
			t.Fatalf("Swap(%s: %s) = %v, %v", c.header, c.in, names, err)
		}
		if got := h.Get(c.header); got != c.want {
			t.Errorf("Swap(%s: %s) = %q, want %q", c.header, c.in, got, c.want)
		}
	}
	h := http.Header{"X-Api-Key": {cph}}
	if names, err := g.Swap(context.Background(), "sb1", "y.example.com", 443, h); err != nil || len(names) != 1 || h.Get("X-Api-Key") != "custom-value" {
		t.Fatalf("custom header: %v %v %v", names, err, h)
	}
	// Rotation takes effect for the running sandbox at once.
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Env: "GITHUB_TOKEN", Grant: GrantAll}, "rotated")
	h = http.Header{"Authorization": {ph}}
	if _, err := g.Swap(context.Background(), "sb1", "api.github.com", 443, h); err != nil || h.Get("Authorization") != "Bearer rotated" {
		t.Fatalf("after rotation: %v %v", h, err)
	}
	g.Detach("sb1")
	if g.Intercept("sb1", "api.github.com", 443) || g.Contains("sb1", []byte(ph)) {
		t.Fatal("grants outlive Detach")
	}
}

func TestHostileSecretsMisuse(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Grant: GrantAll}, testValue)
	k.set(t, Meta{Name: "npm", Hosts: []string{"registry.npmjs.org"}, Grant: GrantAll}, "npm-value")
	g := newGrants(t, k, nil)
	env, err := g.Attach(context.Background(), "sb1", "agent", []string{"github", "npm"})
	if err != nil {
		t.Fatal(err)
	}
	ph, nph := envValue(env, "GITHUB"), envValue(env, "NPM")
	cases := []http.Header{
		{"Authorization": {"Bearer " + ph}},
		{"X-Exfil": {ph}},
		{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte("u:"+ph))}},
		// One good placeholder and one bad: nothing is swapped.
		{"Authorization": {"Bearer " + nph}, "X-Exfil": {ph}},
	}
	for i, h := range cases {
		before := h.Clone()
		_, err := g.Swap(context.Background(), "sb1", "registry.npmjs.org", 443, h)
		if !errors.Is(err, ErrMisuse) {
			t.Fatalf("case %d: Swap = %v, want ErrMisuse", i, err)
		}
		if strings.Contains(err.Error(), testValue) || strings.Contains(err.Error(), "npm-value") {
			t.Fatalf("case %d: the error holds a value: %v", i, err)
		}
		for k, v := range before {
			if h.Get(k) != v[0] {
				t.Fatalf("case %d: a refused Swap changed %s", i, k)
			}
		}
	}
	h := http.Header{"Ironclaw-Secret-Github-" + strings.TrimPrefix(ph, PlaceholderPrefix+"github-"): {"x"}}
	if _, err := g.Swap(context.Background(), "sb1", "api.github.com", 443, h); !errors.Is(err, ErrMisuse) {
		t.Fatalf("placeholder in a header name: %v", err)
	}
	// Removed, then set again under the same name: another secret.
	if err := k.st.Remove(context.Background(), "operator", "github"); err != nil {
		t.Fatal(err)
	}
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Grant: GrantAll}, "new")
	if _, err := g.Swap(context.Background(), "sb1", "api.github.com", 443, http.Header{"Authorization": {ph}}); !errors.Is(err, ErrDenied) {
		t.Fatalf("a removed secret's placeholder: %v", err)
	}
	if g.Intercept("sb1", "api.github.com", 443) {
		t.Fatal("Intercept for a removed secret")
	}
}

func TestGrantAskWaitsForDecision(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}}, testValue)
	a := &fakeAsker{}
	g := newGrants(t, k, a)
	env, err := g.Attach(context.Background(), "sb1", "agent", []string{"github"})
	if err != nil {
		t.Fatal(err)
	}
	env2, err := g.Attach(context.Background(), "sb2", "agent", []string{"github"})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.asked) != 2 {
		t.Fatalf("asked %v", a.asked)
	}
	if !g.Intercept("sb1", "api.github.com", 443) {
		t.Fatal("a pending grant must be intercepted")
	}
	if gs := g.Of("sb1"); len(gs) != 1 || gs[0].State != StatePending || gs[0].Approval != "ap-sb1-github" {
		t.Fatalf("Of = %+v", gs)
	}
	ph := envValue(env, "GITHUB")
	done := make(chan error, 1)
	h := http.Header{"Authorization": {ph}}
	go func() {
		_, err := g.Swap(context.Background(), "sb1", "api.github.com", 443, h)
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("Swap returned before the decision: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	a.answer("ap-sb1-github", true)
	if err := <-done; err != nil || h.Get("Authorization") != "Bearer "+testValue {
		t.Fatalf("after approval: %v %v", err, h)
	}
	a.answer("ap-sb2-github", false)
	_, err = g.Swap(context.Background(), "sb2", "api.github.com", 443, http.Header{"Authorization": {envValue(env2, "GITHUB")}})
	if !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), "denied by test") {
		t.Fatalf("denied: %v", err)
	}
	if g.Intercept("sb2", "api.github.com", 443) {
		t.Fatal("a denied grant is still intercepted")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	env3, _ := g.Attach(context.Background(), "sb3", "agent", []string{"github"})
	if _, err := g.Swap(ctx, "sb3", "api.github.com", 443, http.Header{"Authorization": {envValue(env3, "GITHUB")}}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Swap with an ended context = %v", err)
	}
	states := map[string]int{}
	for _, rec := range records(t, k.log) {
		if rec.Kind == KindGrant {
			switch {
			case bytes.Contains(rec.Data, []byte(`"state":"pending"`)):
				states["pending"]++
			case bytes.Contains(rec.Data, []byte(`"state":"granted"`)):
				states["granted"]++
			case bytes.Contains(rec.Data, []byte(`"state":"denied"`)):
				states["denied"]++
			}
		}
	}
	if states["pending"] != 3 || states["granted"] != 1 || states["denied"] != 1 {
		t.Fatalf("secret.grant records: %v", states)
	}
}

func TestHostileSecretsAttachBounds(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "a", Hosts: []string{"a.com"}, Env: "SAME", Grant: GrantAll}, "v")
	k.set(t, Meta{Name: "b", Hosts: []string{"b.com"}, Env: "SAME", Grant: GrantAll}, "v")
	k.set(t, Meta{Name: "ask", Hosts: []string{"c.com"}}, "v")
	many := make([]string, MaxPerSandbox+1)
	for i := range many {
		many[i] = "a"
	}
	noAsk := newGrants(t, k, nil)
	for _, c := range []struct {
		names []string
		want  error
	}{
		{[]string{"a", "b"}, ErrInvalid},
		{[]string{"a", "a"}, ErrInvalid},
		{[]string{"missing"}, ErrInvalid},
		{[]string{"Bad"}, ErrInvalid},
		{many, ErrInvalid},
		{[]string{"ask"}, ErrUnavailable},
	} {
		if _, err := noAsk.Attach(context.Background(), "sb", "agent", c.names); !errors.Is(err, c.want) {
			t.Errorf("Attach(%v) = %v, want %v", c.names, err, c.want)
		}
		if len(noAsk.Of("sb")) != 0 {
			t.Fatalf("a refused Attach left grants")
		}
	}
	fa := &fakeAsker{failWith: errors.New("too many pending")}
	failing := newGrants(t, k, fa)
	if _, err := failing.Attach(context.Background(), "sb", "agent", []string{"a", "ask"}); err == nil || len(failing.Of("sb")) != 0 {
		t.Fatalf("Attach with a failing asker = %v, grants %v", err, failing.Of("sb"))
	}
	if len(fa.withdrawn) != 0 {
		t.Fatalf("withdrew %v although nothing was filed", fa.withdrawn)
	}
	// The second ask fails: the first one filed is withdrawn.
	k.set(t, Meta{Name: "ask2", Hosts: []string{"d.com"}, Env: "ASK_TWO"}, "v")
	fa2 := &fakeAsker{failWith: errors.New("too many pending"), failAfter: 1}
	failing2 := newGrants(t, k, fa2)
	if _, err := failing2.Attach(context.Background(), "sb", "agent", []string{"ask", "ask2"}); err == nil || len(failing2.Of("sb")) != 0 {
		t.Fatalf("Attach failing at the second ask = %v", err)
	}
	if len(fa2.withdrawn) != 1 || fa2.withdrawn[0] != "sb" {
		t.Fatalf("withdrawn %v, want [sb]", fa2.withdrawn)
	}
}

// A write that fails (here: the file's place is taken by a directory, so
// the rename fails) changes nothing: the old value stays in force and on
// record, and no temporary file is left behind.
func TestHostileSecretsFailedWriteChangesNothing(t *testing.T) {
	k := newKit(t)
	k.set(t, Meta{Name: "github", Hosts: []string{"api.github.com"}, Grant: GrantAll}, "old-value")
	path := filepath.Join(k.dir, FileName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := k.st.Set(context.Background(), "operator", Meta{Name: "github", Hosts: []string{"evil.example.com"}, Grant: GrantAll}, []byte("new-value")); err == nil {
		t.Fatal("Set succeeded although the file could not be written")
	}
	if err := k.st.Remove(context.Background(), "operator", "github"); err == nil {
		t.Fatal("Remove succeeded although the file could not be written")
	}
	m, err := k.st.Get("github")
	if err != nil || m.Version != 1 || m.Hosts[0] != "api.github.com" {
		t.Fatalf("after failed writes: %+v, %v", m, err)
	}
	r, _ := k.st.current("github")
	if v, _ := k.st.value(r); string(v) != "old-value" {
		t.Fatalf("value after a failed write = %q", v)
	}
	ents, _ := os.ReadDir(k.dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".secrets-") {
			t.Fatalf("a temporary file is left: %s", e.Name())
		}
	}
	// Both failures are on record as results with an error.
	errs := 0
	for _, rec := range records(t, k.log) {
		if (rec.Kind == KindSet || rec.Kind == KindRemove) && bytes.Contains(rec.Data, []byte(`"error"`)) {
			errs++
		}
	}
	if errs != 2 {
		t.Fatalf("%d failed results on record, want 2", errs)
	}
}
