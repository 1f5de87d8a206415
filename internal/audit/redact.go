package audit

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Redacted replaces every secret the Redactor finds.
const Redacted = "[REDACTED]"

// secretName is the part of a name that marks its value as a secret, in
// assignments ("password=...", "OPENAI_API_KEY: ...") and flags
// ("--token ..."). It mirrors SensitiveKey, but a pattern inside free text
// has to be narrower: "token" must end the name, so "max_tokens=5" stays.
const secretName = `(?:api[_\-]?key|access[_\-]?key|token|secret|passw(?:or)?d|passphrase|credentials?)`

// keyPatterns matches credential-shaped substrings. Alternatives with a
// capture group keep the captured prefix (the name, the "Bearer ") and lose
// only what follows; the others are replaced whole. Each needs a long enough
// body that ordinary words and ids do not match, and starts at a word
// boundary so "task-..." is not read as "sk-...".
//
//	Bearer <token>                     HTTP bearer credentials
//	name=value, name: value            assignments to a secret-named name (env, URLs, YAML, JSON text)
//	--name value                       command-line flags with a secret-named name
//	sk-...                             OpenAI / Anthropic keys, sk-ant-... and sk-proj-... included
//	ghp_..., github_pat_...            GitHub tokens
//	xoxb-...                           Slack tokens
//	AKIA..., ASIA...                   AWS access key ids
//	eyJ....eyJ....sig                  JSON Web Tokens
const keyPatterns = `(?i:\b(bearer\s+))[A-Za-z0-9\-._~+/]{8,}=*` +
	`|(?i:\b([A-Za-z0-9_.\-]*` + secretName + `["']?\s*[:=]\s*))(?:"[^"]*"|'[^']*'|[^\s"'&,;]+)` +
	`|(?i:(--?` + secretName + `\s+))(?:"[^"]*"|'[^']*'|[^\s"']+)` +
	`|\bsk-[A-Za-z0-9_\-]{16,}` +
	`|\bgh[pousr]_[A-Za-z0-9]{20,}` +
	`|\bgithub_pat_[A-Za-z0-9_]{20,}` +
	`|\bxox[abposr]-[A-Za-z0-9\-]{10,}` +
	`|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b` +
	`|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`

// Redactor removes secrets from audit data before it is hashed and stored.
// It is immutable after NewRedactor and safe for concurrent use.
//
// It replaces, anywhere in a JSON value (string values, recursively through
// objects and arrays):
//   - the exact secret strings given to NewRedactor, wherever they occur
//     inside a string;
//   - substrings shaped like credentials (keyPatterns): provider keys,
//     GitHub/Slack/AWS tokens, JWTs, "Bearer <token>", and the value in
//     "password=...", "API_KEY: ...", "--token ..." and the like;
//   - the whole value of any member whose key names a secret (see
//     SensitiveKey), whatever its type, except null and booleans, which
//     cannot carry one.
//
// Object keys themselves are not rewritten: a key is a name chosen by the
// code that logs the event, and rewriting one could make two keys collide.
// Data with a key that holds a secret is refused instead.
type Redactor struct {
	patterns *regexp.Regexp
	exact    *strings.Replacer // nil when there are no exact secrets
}

// NewRedactor returns a Redactor that also removes each of secrets (the
// daemon's real API keys and tokens). Empty strings are ignored; anything
// else is taken at its word, so do not pass short common strings.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{patterns: regexp.MustCompile(keyPatterns)}
	var list []string
	for _, s := range secrets {
		if s != "" {
			list = append(list, s)
		}
	}
	if len(list) > 0 {
		// strings.Replacer tries the old strings in argument order at each
		// position, so longer secrets go first: a secret that contains
		// another must be removed whole, not leave its tail behind.
		slices.SortFunc(list, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
		list = slices.Compact(list)
		pairs := make([]string, 0, 2*len(list))
		for _, s := range list {
			pairs = append(pairs, s, Redacted)
		}
		r.exact = strings.NewReplacer(pairs...)
	}
	return r
}

// RedactString returns s with every exact secret and credential-shaped
// substring replaced by "[REDACTED]"; for bearer credentials, assignments and
// flags only the value goes ("Bearer [REDACTED]", "password=[REDACTED]").
func (r *Redactor) RedactString(s string) string {
	if r.exact != nil {
		s = r.exact.Replace(s)
	}
	// The shortest thing a pattern matches ("pwd=x" style assignments
	// excluded, which need a longer name) is longer than this; skipping
	// short strings keeps the regexp off the many tiny values (ids, enums).
	if len(s) < 7 || !mayHoldCredential(s) {
		return s
	}
	matches := r.patterns.FindAllStringSubmatchIndex(s, -1)
	if matches == nil {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, m := range matches {
		start, end := m[0], m[1]
		b.WriteString(s[last:start])
		last = end
		keep := -1
		for g := 2; g < len(m); g += 2 {
			if m[g] >= 0 {
				keep = m[g+1]
				break
			}
		}
		if keep < 0 {
			b.WriteString(Redacted)
			continue
		}
		b.WriteString(s[start:keep])
		// A quoted value keeps its quotes, so JSON or shell text stays
		// well formed.
		if v := s[keep:end]; len(v) >= 2 && (v[0] == '"' || v[0] == '\'') && v[len(v)-1] == v[0] {
			b.WriteByte(v[0])
			b.WriteString(Redacted)
			b.WriteByte(v[0])
		} else {
			b.WriteString(Redacted)
		}
	}
	b.WriteString(s[last:])
	return b.String()
}

// mayHoldCredential is a cheap pre-check for keyPatterns: it reports
// whether s holds, ignoring ASCII case, something that every match of some
// alternative contains: a provider-key prefix, "bearer" before white space,
// or a secret name followed by an assignment (quote, white space, ':' or
// '=') or, after a '-', by white space (a flag). Most logged strings,
// including ones that merely mention tokens ("max_tokens=5", "api:token-1"),
// fail it, and the regexp, which costs microseconds per string, runs only
// on the rest. Keep it in step with keyPatterns: an alternative with no
// trigger here would never be applied (TestPrefilterCoversPatterns checks).
// Names spelled with non-ASCII look-alikes that (?i) would fold (the Kelvin
// sign for 'k') are not looked for.
func mayHoldCredential(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		rest := s[i:]
		switch s[i] | 0x20 { // ASCII lower case; harmless for other bytes
		case 'b':
			if hasPrefixFold(rest, "bearer") && len(rest) > 6 && isSpace(rest[6]) {
				return true
			}
		case 'k':
			if hasPrefixFold(rest, "key") && secretNameEnds(s, i, i+3) {
				return true
			}
		case 't':
			if hasPrefixFold(rest, "token") && secretNameEnds(s, i, i+5) {
				return true
			}
		case 's':
			if strings.HasPrefix(rest, "sk-") || hasPrefixFold(rest, "secret") && secretNameEnds(s, i, i+6) {
				return true
			}
		case 'p':
			for _, w := range [...]string{"passwd", "password", "passphrase"} {
				if hasPrefixFold(rest, w) && secretNameEnds(s, i, i+len(w)) {
					return true
				}
			}
		case 'c':
			if hasPrefixFold(rest, "credential") &&
				(secretNameEnds(s, i, i+10) || len(rest) > 10 && rest[10]|0x20 == 's' && secretNameEnds(s, i, i+11)) {
				return true
			}
		case 'g':
			if len(rest) > 3 && rest[0] == 'g' && rest[1] == 'h' && rest[3] == '_' || strings.HasPrefix(rest, "github_pat_") {
				return true
			}
		case 'x':
			if strings.HasPrefix(rest, "xox") {
				return true
			}
		case 'a':
			if strings.HasPrefix(rest, "AKIA") || strings.HasPrefix(rest, "ASIA") {
				return true
			}
		case 'e':
			if strings.HasPrefix(rest, "eyJ") {
				return true
			}
		}
	}
	return false
}

// secretNameEnds reports whether the secret name s[start:end] is followed
// the way keyPatterns' assignment or flag alternatives need: an optional
// quote, optional white space and ':' or '='; or white space, when a '-'
// comes shortly before the name (within the longest secretName prefix,
// "access_", plus the dash).
func secretNameEnds(s string, start, end int) bool {
	j := end
	if j < len(s) && (s[j] == '"' || s[j] == '\'') {
		j++
	}
	for j < len(s) && isSpace(s[j]) {
		j++
	}
	if j < len(s) && (s[j] == ':' || s[j] == '=') {
		return true
	}
	if end < len(s) && isSpace(s[end]) {
		from := max(0, start-8)
		return strings.IndexByte(s[from:start], '-') >= 0
	}
	return false
}

// isSpace is the regexp \s class.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

// hasPrefixFold is strings.HasPrefix ignoring ASCII case; prefix is lower
// case.
func hasPrefixFold(s, prefix string) bool {
	if len(s) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		if s[i]|0x20 != prefix[i] {
			return false
		}
	}
	return true
}

// SensitiveKey reports whether an object member named key holds a secret.
// The name is lower-cased and stripped of everything but letters and digits
// (so "X-Api-Key", "api_key" and "apiKey" are all "apikey"); it is sensitive
// if it contains apikey, secret, password, passwd, passphrase,
// authorization, credential, privatekey, accesskey or cookie, or ends in
// token. "token" is matched only at the end because model usage data is full
// of keys like "max_tokens" and "token_count" that are counts, not secrets.
func SensitiveKey(key string) bool {
	var buf [64]byte
	n := buf[:0]
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			n = append(n, c)
		case c >= 'A' && c <= 'Z':
			n = append(n, c+('a'-'A'))
		}
	}
	norm := string(n)
	for _, s := range [...]string{"apikey", "secret", "password", "passwd", "passphrase",
		"authorization", "credential", "privatekey", "accesskey", "cookie"} {
		if strings.Contains(norm, s) {
			return true
		}
	}
	return strings.HasSuffix(norm, "token")
}

// checkKey refuses an object key that holds a secret. Keys are not
// rewritten (see Redactor), but silently storing one that is, say, a map
// keyed by API token would leak it, so the entry is refused instead.
func (r *Redactor) checkKey(key string) error {
	if r.RedactString(key) != key {
		return errors.New("audit: an object key in data contains a secret; key the data by something else")
	}
	return nil
}

// redactValue rewrites v in place (objects and arrays) and returns the new
// value (strings).
func (r *Redactor) redactValue(v any) (any, error) {
	switch t := v.(type) {
	case string:
		return r.RedactString(t), nil
	case []any:
		for i := range t {
			e, err := r.redactValue(t[i])
			if err != nil {
				return nil, err
			}
			t[i] = e
		}
		return t, nil
	case *object:
		for i := range t.members {
			m := &t.members[i]
			if err := r.checkKey(m.key); err != nil {
				return nil, err
			}
			if SensitiveKey(m.key) {
				switch m.val.(type) {
				case nil, bool:
				default:
					m.val = Redacted
					continue
				}
			}
			e, err := r.redactValue(m.val)
			if err != nil {
				return nil, err
			}
			m.val = e
		}
		return t, nil
	}
	return v, nil
}

// Canonicalize marshals data (any value encoding/json accepts; a
// json.RawMessage or []byte holding JSON text is used as is; nil means {}),
// requires it to be a JSON object, redacts it and returns its canonical
// JSON text: exactly the bytes Log.Append would hash and store.
func (r *Redactor) Canonicalize(data any) ([]byte, error) {
	switch t := data.(type) {
	case nil:
		return []byte("{}"), nil
	case map[string]any:
		// The common case, encoded straight from the map: marshalling it to
		// JSON and parsing that back was most of Append's CPU cost.
		if t != nil {
			return r.appendValue(make([]byte, 0, 256), t)
		}
	case map[string]string:
		if t != nil {
			return r.appendValue(make([]byte, 0, 256), t)
		}
	}
	return r.canonicalizeSlow(data)
}

// canonicalizeSlow is Canonicalize through encoding/json: marshal, parse,
// redact the tree, encode. It defines the result; appendValue must produce
// the same bytes for the values it handles (TestCanonicalizeFastPath).
func (r *Redactor) canonicalizeSlow(data any) ([]byte, error) {
	var raw []byte
	switch t := data.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		raw = t
	case []byte:
		raw = t
	default:
		b, err := json.Marshal(data)
		if err != nil {
			return nil, fmt.Errorf("audit: marshal data: %w", err)
		}
		raw = b
	}
	v, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("audit: data is not valid JSON: %w", err)
	}
	if _, ok := v.(*object); !ok {
		return nil, fmt.Errorf("audit: data must be a JSON object, got %s", jsonKind(v))
	}
	if v, err = r.redactValue(v); err != nil {
		return nil, err
	}
	return appendCanonical(make([]byte, 0, len(raw)), v), nil
}

// appendValue appends the redacted canonical JSON of a Go value. It handles
// the types audit data is usually built from directly and hands anything
// else (structs, floats, named types, custom marshalers) to encoding/json
// via marshalValue, so the output is the same either way.
func (r *Redactor) appendValue(b []byte, v any) ([]byte, error) {
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if t {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return appendString(b, r.RedactString(t)), nil
	case int:
		return strconv.AppendInt(b, int64(t), 10), nil
	case int64:
		return strconv.AppendInt(b, t, 10), nil
	case int32:
		return strconv.AppendInt(b, int64(t), 10), nil
	case uint64:
		return strconv.AppendUint(b, t, 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(t), 10), nil
	case []string:
		if t == nil {
			return append(b, "null"...), nil // as encoding/json writes a nil slice
		}
		b = append(b, '[')
		for i, s := range t {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, r.RedactString(s))
		}
		return append(b, ']'), nil
	case []any:
		if t == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, e := range t {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = r.appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		if t == nil {
			return append(b, "null"...), nil
		}
		return appendObject(r, b, v, t, r.appendMember)
	case map[string]string:
		if t == nil {
			return append(b, "null"...), nil
		}
		return appendObject(r, b, v, t, func(b []byte, k, s string) ([]byte, error) {
			if SensitiveKey(k) {
				return appendString(b, Redacted), nil
			}
			return appendString(b, r.RedactString(s)), nil
		})
	}
	return r.marshalValue(b, v)
}

// appendObject appends m with sorted keys, each member's value through
// member. Typed maps skip boxing every value into an any; v is m itself, for
// the marshalling fallback when keys cannot be sorted canonically.
func appendObject[V any](r *Redactor, b []byte, v any, m map[string]V, member func([]byte, string, V) ([]byte, error)) ([]byte, error) {
	keys, ok := sortedKeys(m)
	if !ok {
		return r.marshalValue(b, v)
	}
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		if err := r.checkKey(k); err != nil {
			return nil, err
		}
		b = appendString(b, k)
		b = append(b, ':')
		var err error
		if b, err = member(b, k, m[k]); err != nil {
			return nil, err
		}
	}
	return append(b, '}'), nil
}

// appendMember appends the value of object member key, applying the
// secret-named-key rule exactly as redactValue does on a parsed tree: any
// value but null and booleans becomes "[REDACTED]". Whether a Go value
// marshals to null or a boolean is only certain for these types; anything
// else is marshalled first to find out.
func (r *Redactor) appendMember(b []byte, key string, v any) ([]byte, error) {
	if !SensitiveKey(key) {
		return r.appendValue(b, v)
	}
	switch v.(type) {
	case nil, bool:
		return r.appendValue(b, v)
	case string, int, int64, int32, uint64, uint32, []string, []any, map[string]any, map[string]string:
		if isNilValue(v) {
			return append(b, "null"...), nil
		}
		return appendString(b, Redacted), nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("audit: marshal data: %w", err)
	}
	if string(raw) == "null" || string(raw) == "true" || string(raw) == "false" {
		return append(b, raw...), nil
	}
	return appendString(b, Redacted), nil
}

// isNilValue reports whether v is a nil slice or map of the fast-path
// types, which encoding/json writes as null.
func isNilValue(v any) bool {
	switch t := v.(type) {
	case []string:
		return t == nil
	case []any:
		return t == nil
	case map[string]any:
		return t == nil
	case map[string]string:
		return t == nil
	}
	return false
}

// marshalValue is the slow path for one value: through encoding/json and
// the parser, then redacted and encoded like any parsed value.
func (r *Redactor) marshalValue(b []byte, v any) ([]byte, error) {
	var raw []byte
	switch t := v.(type) {
	case json.RawMessage:
		raw = t
		if len(raw) == 0 {
			raw = []byte("null") // what encoding/json writes for it
		}
	default:
		m, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("audit: marshal data: %w", err)
		}
		raw = m
	}
	tree, err := parseJSON(raw)
	if err != nil {
		return nil, fmt.Errorf("audit: data is not valid JSON: %w", err)
	}
	if tree, err = r.redactValue(tree); err != nil {
		return nil, err
	}
	return appendCanonical(b, tree), nil
}

// sortedKeys returns m's keys in byte order, as the canonical form
// requires. It reports false if a key is not valid UTF-8: encoding/json
// rewrites such keys (which can change their order or make two equal), so
// those maps take the slow path.
func sortedKeys[V any](m map[string]V) ([]string, bool) {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !utf8.ValidString(k) {
			return nil, false
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, true
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []any:
		return "an array"
	}
	return "an object"
}
