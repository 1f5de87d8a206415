package audit

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestRedactString(t *testing.T) {
	const (
		openai    = "sk-abcdefghijklmnopqrstuvwxyz0123456789ABCD"
		anthropic = "sk-ant-api03-AbCdEfGhIjKlMnOpQrStUvWxYz_0123456789-abcdefgh"
		proj      = "sk-proj-0123456789abcdefghijABCDEFGHIJ_klmnop-qrstuv"
		ghp       = "ghp_0123456789abcdefghijABCDEFGHIJklmn"
		jwt       = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
		exact     = "hunter2-the-daemon-token"
	)
	r := NewRedactor(exact, "", "tok-short")
	cases := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain text", "ls -la /workspace", "ls -la /workspace"},
		{"openai key alone", openai, Redacted},
		{"anthropic key", anthropic, Redacted},
		{"project key", proj, Redacted},
		{"key inside command", "curl -H 'x-api-key: " + anthropic + "' https://api", "curl -H 'x-api-key: " + Redacted + "' https://api"},
		{"key in env assignment", "OPENAI_API_KEY=" + openai, "OPENAI_API_KEY=" + Redacted},
		{"two keys", openai + " and " + proj, Redacted + " and " + Redacted},
		{"bearer header", "Authorization: Bearer abcdef123456.xyz_~+/==", "Authorization: Bearer " + Redacted},
		{"bearer lower case", "bearer 0123456789abcdef", "bearer " + Redacted},
		{"bearer with key", "Bearer " + openai, "Bearer " + Redacted},
		{"github token", "token " + ghp + " end", "token " + Redacted + " end"},
		{"aws key id", "AKIAIOSFODNN7EXAMPLE", Redacted},
		{"jwt", "cookie=" + jwt, "cookie=" + Redacted},
		{"exact secret", "the token is " + exact + "!", "the token is " + Redacted + "!"},
		{"exact secret twice", exact + exact, Redacted + Redacted},
		{"short exact secret", "x tok-short y", "x " + Redacted + " y"},
		{"env assignment by name", "DB_PASSWORD=hunter2 make", "DB_PASSWORD=" + Redacted + " make"},
		{"url query token", "https://x.test/cb?access_token=abc123&state=ok", "https://x.test/cb?access_token=" + Redacted + "&state=ok"},
		{"yaml style", "api_key: 0123abcd", "api_key: " + Redacted},
		{"json text", `{"token": "abc def", "n": 1}`, `{"token": "` + Redacted + `", "n": 1}`},
		{"flag with quoted value", "login --password 'correct horse battery staple' -v", "login --password '" + Redacted + "' -v"},
		{"flag with equals", "gh --token=abcdef", "gh --token=" + Redacted},
		{"flag with space", "cli --api-key abcdef next", "cli --api-key " + Redacted + " next"},
		// Things that look a little like keys but are not.
		{"token counts", "max_tokens=512 tokens: 3", "max_tokens=512 tokens: 3"},
		{"prose about tokens", "the token is valid", "the token is valid"},
		{"word ending in sk", "task-runner-for-everything-here", "task-runner-for-everything-here"},
		{"short sk", "sk-123", "sk-123"},
		{"bearer prose", "the bearer of news", "the bearer of news"},
		{"uuid", "4f9c1a7e-2b3d-4c5e-8f90-123456789abc", "4f9c1a7e-2b3d-4c5e-8f90-123456789abc"},
		{"sha256 hex", strings.Repeat("ab", 32), strings.Repeat("ab", 32)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := r.RedactString(c.in); got != c.want {
				t.Errorf("RedactString(%q)\n got %q\nwant %q", c.in, got, c.want)
			}
		})
	}
}

func TestRedactLongerSecretFirst(t *testing.T) {
	// One secret is a prefix of another; the longer must be removed whole.
	r := NewRedactor("abcdefgh", "abcdefgh-ijklmnop")
	if got := r.RedactString("x abcdefgh-ijklmnop y"); got != "x "+Redacted+" y" {
		t.Errorf("got %q", got)
	}
}

func TestSensitiveKey(t *testing.T) {
	cases := map[string]bool{
		"api_key":               true,
		"apiKey":                true,
		"APIKEY":                true,
		"x-api-key":             true,
		"openai_api_key":        true,
		"token":                 true,
		"access_token":          true,
		"refreshToken":          true,
		"GITHUB_TOKEN":          true,
		"secret":                true,
		"client_secret":         true,
		"aws_secret_access_key": true,
		"password":              true,
		"db_password":           true,
		"passwd":                true,
		"authorization":         true,
		"Proxy-Authorization":   true,
		"credentials":           true,
		"private_key":           true,
		"set-cookie":            true,
		// Not secrets: model usage counts and ordinary fields.
		"max_tokens":    false,
		"input_tokens":  false,
		"token_count":   false,
		"tokens":        false,
		"command":       false,
		"session":       false,
		"key":           false,
		"authoritative": false,
		"":              false,
	}
	for k, want := range cases {
		if got := SensitiveKey(k); got != want {
			t.Errorf("SensitiveKey(%q) = %v, want %v", k, got, want)
		}
	}
}

func TestCanonicalizeRedacts(t *testing.T) {
	r := NewRedactor("my-real-daemon-secret-123")
	cases := []struct {
		name string
		in   any
		want string
	}{
		{"nil is empty object", nil, `{}`},
		// Under a secret-named key every string and number is redacted,
		// at any depth; the structure stays, so nothing in it can hide
		// shell syntax behind the redaction.
		{"secret-named keys, any type",
			map[string]any{"api_key": "abc", "password": 1234, "token": map[string]any{"v": "x"}, "secret": nil, "has_password": true},
			`{"api_key":"[REDACTED]","has_password":true,"password":"[REDACTED]","secret":null,"token":{"v":"[REDACTED]"}}`},
		{"nested patterns in arrays and objects",
			map[string]any{"argv": []any{"curl", "-H", "Authorization: Bearer abcdefgh12345678"}, "env": map[string]any{"HOME": "/workspace", "OPENAI_API_KEY": "sk-abcdefghijklmnopqrstuvwx"}},
			`{"argv":["curl","-H","Authorization: Bearer [REDACTED]"],"env":{"HOME":"/workspace","OPENAI_API_KEY":"[REDACTED]"}}`},
		{"exact secret in deep string",
			map[string]any{"a": []any{map[string]any{"b": "pre my-real-daemon-secret-123 post"}}},
			`{"a":[{"b":"pre [REDACTED] post"}]}`},
		{"usage counts kept",
			map[string]any{"max_tokens": 1024, "usage": map[string]any{"input_tokens": 10, "output_tokens": 20}},
			`{"max_tokens":1024,"usage":{"input_tokens":10,"output_tokens":20}}`},
		{"struct", struct {
			Cmd   string `json:"cmd"`
			Token string `json:"token"`
		}{"ls", "t0k"}, `{"cmd":"ls","token":"[REDACTED]"}`},
		{"raw message", json.RawMessage(`{ "b" : 2, "a" : [1, 2.50, -3e10] }`), `{"a":[1,2.50,-3e10],"b":2}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := r.Canonicalize(c.in)
			if err != nil {
				t.Fatalf("Canonicalize: %v", err)
			}
			if string(got) != c.want {
				t.Errorf("got  %s\nwant %s", got, c.want)
			}
		})
	}
}

func TestCanonicalizeRejects(t *testing.T) {
	r := NewRedactor("the-daemon-secret-xyz")
	for name, in := range map[string]any{
		"string":              "hello",
		"array":               []int{1, 2},
		"number":              42,
		"null raw":            json.RawMessage(`null`),
		"invalid raw":         json.RawMessage(`{"a":`),
		"trailing":            json.RawMessage(`{"a":1} {}`),
		"duplicate key":       json.RawMessage(`{"a":1,"a":2}`),
		"unmarshalable":       map[string]any{"f": func() {}},
		"secret as key":       map[string]any{"sessions": map[string]any{"sk-abcdefghijklmnopqrstuvwx": 1}},
		"secret as key, raw":  json.RawMessage(`{"by_session":{"Bearer abcdefgh12345678":true}}`),
		"exact secret as key": map[string]string{"the-daemon-secret-xyz": "v"},
	} {
		if got, err := r.Canonicalize(in); err == nil {
			t.Errorf("%s: accepted, gave %s", name, got)
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	cases := []struct{ in, want string }{
		// Key order and white space do not matter.
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"{\n  \"a\" : 2 ,\t\"b\":1 }", `{"a":2,"b":1}`},
		{`{"z":{"y":1,"x":[{"d":1,"c":2}]}}`, `{"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		// Keys sort by UTF-8 bytes: upper case before lower, ASCII before the rest.
		{`{"b":1,"B":2,"é":3,"a":4}`, `{"B":2,"a":4,"b":1,"é":3}`},
		// Escapes: only the mandatory ones; HTML characters and non-ASCII raw.
		{`{"s":"\u003c\u003e\u0026 \u00e9 \u2028"}`, "{\"s\":\"<>& é \u2028\"}"},
		{`{"s":"\"\\\/\b\f\n\r\t\u0001\u001f"}`, `{"s":"\"\\/\b\f\n\r\t\u0001\u001f"}`},
		{`{"s":"\ud83d\ude00"}`, "{\"s\":\"\U0001F600\"}"},
		// Numbers keep their literal text; big integers are not rounded.
		{`{"n":12345678901234567890,"f":1.50,"e":1E3}`, `{"e":1E3,"f":1.50,"n":12345678901234567890}`},
		{`{"t":true,"f":false,"n":null,"a":[],"o":{}}`, `{"a":[],"f":false,"n":null,"o":{},"t":true}`},
	}
	for _, c := range cases {
		got, err := CanonicalJSON([]byte(c.in))
		if err != nil {
			t.Errorf("CanonicalJSON(%s): %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("CanonicalJSON(%s)\n got %s\nwant %s", c.in, got, c.want)
		}
		// Canonical form is a fixed point.
		again, err := CanonicalJSON(got)
		if err != nil || string(again) != string(got) {
			t.Errorf("not idempotent: %s -> %s (%v)", got, again, err)
		}
		if !json.Valid(got) {
			t.Errorf("canonical form %s is not valid JSON", got)
		}
	}
}

func TestComputeHashKnownAnswer(t *testing.T) {
	// Pins the encoding: if this changes, every existing log stops
	// verifying, so it may only change together with encodingTag.
	rec := Record{
		Seq:      1,
		Session:  "s1",
		Actor:    "api",
		Kind:     KindSandboxCreate,
		Data:     json.RawMessage(`{"id":"sb-1"}`),
		PrevHash: GenesisHash,
	}
	rec.Time = mustTime(t, "2025-01-02T03:04:05.000000006Z")
	got, err := rec.ComputeHash()
	if err != nil {
		t.Fatal(err)
	}
	// Computed independently (Python hashlib + struct) from the spec in
	// ComputeHash's doc comment.
	const want = "45c9bef870dceabe1e8949d424198772c52cc71996e86e87867dc5b4e11818ed"
	if got != want {
		t.Errorf("hash = %s, want %s", got, want)
	}
	// Every field is bound into the hash.
	for name, mut := range map[string]func(*Record){
		"seq":     func(r *Record) { r.Seq = 2 },
		"time":    func(r *Record) { r.Time = r.Time.Add(1) },
		"session": func(r *Record) { r.Session = "s2" },
		"actor":   func(r *Record) { r.Actor = "apj" },
		"kind":    func(r *Record) { r.Kind = KindSandboxExec },
		"data":    func(r *Record) { r.Data = json.RawMessage(`{"id":"sb-2"}`) },
		"prev":    func(r *Record) { r.PrevHash = strings.Repeat("1", 64) },
		// Moving bytes between adjacent fields must change the hash.
		"boundary": func(r *Record) { r.Session, r.Actor = "s1a", "pi" },
	} {
		r2 := rec
		mut(&r2)
		h2, err := r2.ComputeHash()
		if err != nil {
			t.Fatal(err)
		}
		if h2 == got {
			t.Errorf("changing %s did not change the hash", name)
		}
	}
	if _, err := (Record{PrevHash: "xyz"}).ComputeHash(); err == nil {
		t.Error("ComputeHash accepted a malformed prev_hash")
	}
}

// fragmentJoins returns a source of pseudo-random strings, the same for
// the same seed on every run: each joins 1 to most fragments of frags.
func fragmentJoins(seed uint64, frags []string, most int) func() string {
	rng := seed
	next := func(n int) int { // xorshift64
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int(rng % uint64(n))
	}
	return func() string {
		var b strings.Builder
		for j := next(most) + 1; j > 0; j-- {
			b.WriteString(frags[next(len(frags))])
		}
		return b.String()
	}
}

// TestPrefilterCoversPatterns checks that mayHoldCredential never hides a
// string the regexp would match, on random strings built from fragments of
// every pattern in mixed case.
func TestPrefilterCoversPatterns(t *testing.T) {
	r := NewRedactor()
	frags := []string{
		"Bearer ", "bEaReR\t", "sk-", "sk-ant-", "ghp_", "gho_", "github_pat_", "xoxb-", "AKIA", "ASIA",
		"eyJ", ".", "API_KEY=", "apikey: ", "Access-Key=", "TOKEN=", "token: ", "Secret=", "PASSWORD=", "passwd:",
		"passphrase=", "Credentials: ", "--token ", "-password ", "--api-key=", "'", "\"", "=", " ", "_", "-",
		"abcdefghij", "0123456789", "ABCDEFGHIJKLMNOP", "x", "/", "&",
		"key", "KEY", "token", "secret", "password", "Passwd", "credentials", "access_", "api-", "--", ":", "\t", "\n",
	}
	random := fragmentJoins(1, frags, 8)
	matched := 0
	for i := 0; i < 100000; i++ {
		s := random()
		if r.patterns.MatchString(s) {
			matched++
			if !mayHoldCredential(s) {
				t.Fatalf("prefilter misses %q, which the pattern matches", s)
			}
		}
	}
	if matched < 1000 {
		t.Fatalf("only %d random strings matched; the test is not exercising the patterns", matched)
	}
}

// TestCanonicalizeFastPath checks that encoding Go maps directly gives the
// same bytes as the reference path through encoding/json.
func TestCanonicalizeFastPath(t *testing.T) {
	type inner struct {
		Name  string  `json:"name"`
		Token string  `json:"token,omitempty"`
		F     float64 `json:"f"`
	}
	type named string
	r := NewRedactor("exact-secret-123456")
	values := []map[string]any{
		{},
		{"a": 1, "b": "two", "c": true, "d": nil, "e": int64(-5), "f": uint64(1 << 63), "g": int32(7), "h": uint32(8)},
		{"argv": []string{"sh", "-c", "echo exact-secret-123456; curl -H 'Authorization: Bearer abcdefgh12345678'"}},
		{"nested": map[string]any{"z": []any{1, "x", map[string]any{"password": "p"}, nil, []any{}}, "a": map[string]string{"api_key": "k", "ok": "v"}}},
		{"token": "t", "secret": nil, "has_password": false, "password": 0, "credentials": []string{"a"}, "api_key": map[string]any{"x": 1}},
		{"token": []string(nil), "secret_map": map[string]any(nil), "apikey": json.RawMessage(`null`), "passwd": json.RawMessage(`true`)},
		{"float": 1.5, "big": 1e21, "small": 1e-7, "struct": inner{Name: "n", Token: "tt", F: 2}, "named": named("sk-abcdefghijklmnopqrstuvwxyz")},
		{"raw": json.RawMessage(`{"b":1,"a":{"token":"x"}}`), "rawnil": json.RawMessage(nil), "bytes": []byte("hi"), "ptr": &inner{Name: "p"}},
		{"html": "<a href='x'>&</a>", "ctl": "a\x00b\x1fc\u2028", "bad": "\xff\xfe", "unicode": "é😀"},
		{"\xffbad key": 1, "\xfebad key": 2, "k": "v"},
		{"nilslice": []any(nil), "nilstrings": []string(nil), "nilmap": map[string]string(nil)},
		{"Z": 1, "a": 2, "é": 3, "B": 4, "_": 5},
		// Elided values, through both paths.
		{"long": strings.Repeat("é", 3000), "argv": []string{"x", strings.Repeat("token=a ", 600)}, "m": map[string]string{"password": strings.Repeat("p", 5000)}},
		{"wide": func() []any {
			a := make([]any, 3000)
			for i := range a {
				a[i] = strings.Repeat("y", 10)
			}
			return a
		}(), "n": 1},
	}
	for i, v := range values {
		fast, ferr := r.canonicalize(v) // before shrink, which both share
		slow, serr := r.canonicalizeSlow(v)
		if (ferr == nil) != (serr == nil) {
			t.Errorf("#%d: fast error %v, slow error %v", i, ferr, serr)
			continue
		}
		if string(fast) != string(slow) {
			t.Errorf("#%d: fast path differs\nfast %.2000s\nslow %.2000s", i, fast, slow)
		}
		if ferr == nil {
			// What Append stores is canonical and bounded.
			out, _ := r.Canonicalize(v)
			if again, err := CanonicalJSON(out); err != nil || string(again) != string(out) || len(out) > MaxDataBytes {
				t.Errorf("#%d: Canonicalize gave %d bytes, not canonical (%v): %.300s", i, len(out), err, out)
			}
		}
	}
	ms := map[string]string{"authorization": "Bearer abcdefgh12345678", "x": "exact-secret-123456 y"}
	fast, _ := r.Canonicalize(ms)
	slow, _ := r.canonicalizeSlow(ms)
	if string(fast) != string(slow) {
		t.Errorf("map[string]string: fast %s slow %s", fast, slow)
	}
}

// SetExtra's secrets (the brokered secrets' values, which change while
// the daemon runs) are redacted beside NewRedactor's, and replaced whole
// by the next call.
func TestRedactorSetExtra(t *testing.T) {
	r := NewRedactor("base-secret-0123456789")
	in := "a base-secret-0123456789 b dynamic-value-abcdef c"
	if got := r.RedactString(in); got != "a "+Redacted+" b dynamic-value-abcdef c" {
		t.Fatalf("before SetExtra: %q", got)
	}
	r.SetExtra([]string{"dynamic-value-abcdef", ""})
	if got := r.RedactString(in); got != "a "+Redacted+" b "+Redacted+" c" {
		t.Fatalf("after SetExtra: %q", got)
	}
	r.SetExtra(nil)
	if got := r.RedactString(in); got != "a "+Redacted+" b dynamic-value-abcdef c" {
		t.Fatalf("after SetExtra(nil): %q", got)
	}
}
