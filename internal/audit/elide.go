package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Bounds on what one record stores, enforced by Redactor.Canonicalize and
// so by Log.Append for every caller. Without them an agent could grow the
// log by tens of MB/s with megabyte-long argv; with them a record's data
// is at most MaxDataBytes (plus a few dozen bytes for an intent_seq), so a
// record is at most about 17 KiB on disk, and at the API's default rate
// (50 requests/s per token) one token adds at most about 850 KB/s.
const (
	// MaxStringBytes is the longest string value stored verbatim (after
	// redaction). A command line or script up to 4 KiB stays readable.
	MaxStringBytes = 4096
	// ElidedPrefixBytes is how much of a longer value is kept.
	ElidedPrefixBytes = 1024
	// MaxDataBytes caps a record's canonical data.
	MaxDataBytes = 16 << 10
)

// Kinds of elided value (the "elided" member).
const (
	// elidedString: bytes and sha256 are of the string's bytes, with the
	// Redactor's exact secrets (the daemon's tokens and keys) replaced by
	// "[REDACTED]"; the prefix is fully redacted.
	elidedString = "string"
	// elidedJSON: bytes and sha256 are of the value's canonical JSON text
	// (a member too large for the record, or the whole data).
	elidedJSON = "json"
)

// elidedObject is what replaces a value too long to store:
//
//	{"bytes": 10485760, "elided": "string", "prefix": "<first 1 KiB, redacted>", "sha256": "<hex>"}
//
// bytes and sha256 are of whole; prefix is cut at a UTF-8 boundary at or
// before ElidedPrefixBytes. Since strings an agent passes (argv elements,
// paths) can only produce strings, an object in their place is always this
// marker, never agent text.
//
// It is parsed from appendElided's text, the one spelling of the marker:
// an elided string is rare, and its hash costs more than the parse.
func elidedObject(kind, whole, prefix string) any {
	v, err := parseJSON(appendElided(nil, kind, whole, prefix))
	if err != nil {
		panic("audit: elided marker: " + err.Error()) // appendElided writes canonical JSON
	}
	return v
}

// appendElided appends elidedObject's canonical text.
func appendElided(b []byte, kind, whole, prefix string) []byte {
	sum := sha256.Sum256([]byte(whole))
	b = append(b, `{"bytes":`...)
	b = strconv.AppendInt(b, int64(len(whole)), 10)
	b = append(b, `,"elided":`...)
	b = appendString(b, kind)
	b = append(b, `,"prefix":`...)
	b = appendString(b, cutPrefix(prefix))
	b = append(b, `,"sha256":"`...)
	b = hex.AppendEncode(b, sum[:])
	return append(b, `"}`...)
}

// cutPrefix shortens s to at most ElidedPrefixBytes, at a UTF-8 boundary.
func cutPrefix(s string) string {
	n := min(len(s), ElidedPrefixBytes)
	for n > 0 && n < len(s) && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// shrink bounds canonical object text that is over MaxDataBytes: it elides
// the largest top-level members until the rest fits, and the whole object
// if that is not enough. It works on the canonical text itself (a member's
// canonical text is the slice of canon it occupies), so a hostile
// megabyte costs a scan and a hash, not a parse and re-encoding.
func shrink(canon []byte) []byte {
	whole := func() []byte { return appendElided(nil, elidedJSON, string(canon), string(canon)) }
	ms, ok := topMembers(canon)
	if !ok {
		return whole() // cannot happen: canon is a canonical object
	}
	total := len(canon)
	order := make([]int, len(ms))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(ms[b].size(), ms[a].size()) })
	repl := make([][]byte, len(ms))
	for _, i := range order {
		if total <= MaxDataBytes {
			break
		}
		v := string(canon[ms[i].val:ms[i].end])
		e := appendElided(nil, elidedJSON, v, v)
		if len(e) >= ms[i].size() {
			break // the rest are small; eliding them would not help
		}
		repl[i] = e
		total += len(e) - ms[i].size()
	}
	if total > MaxDataBytes {
		return whole()
	}
	out := make([]byte, 0, total)
	out = append(out, '{')
	for i, m := range ms {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, canon[m.key:m.val]...) // "key":
		if repl[i] != nil {
			out = append(out, repl[i]...)
		} else {
			out = append(out, canon[m.val:m.end]...)
		}
	}
	return append(out, '}')
}

// span locates one top-level member in canonical object text: its key
// (from the opening quote, through the colon) and its value.
type span struct{ key, val, end int }

func (s span) size() int { return s.end - s.val }

// topMembers splits canonical object text into its top-level members. It
// relies on the text being canonical (no white space, valid JSON), which
// Canonicalize guarantees.
func topMembers(b []byte) ([]span, bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return nil, false
	}
	var out []span
	i := 1
	for i < len(b)-1 {
		k := i
		j, ok := skipString(b, i)
		if !ok || j >= len(b) || b[j] != ':' {
			return nil, false
		}
		v := j + 1
		e, ok := skipValue(b, v)
		if !ok {
			return nil, false
		}
		out = append(out, span{k, v, e})
		i = e
		if i < len(b)-1 {
			if b[i] != ',' {
				return nil, false
			}
			i++
		}
	}
	return out, true
}

// skipString returns the index after the JSON string starting at b[i].
func skipString(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipValue returns the index after the canonical JSON value at b[i]: the
// index of the ',' or '}' that follows it in the enclosing object.
func skipValue(b []byte, i int) (int, bool) {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			j, ok := skipString(b, i)
			if !ok {
				return 0, false
			}
			i = j
		case '{', '[':
			depth++
			i++
		case '}', ']':
			if depth == 0 {
				return i, true
			}
			depth--
			i++
		case ',':
			if depth == 0 {
				return i, true
			}
			i++
		default:
			i++
		}
	}
	return 0, false
}
