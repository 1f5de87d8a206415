package audit

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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
	// elidedString: bytes and sha256 are of the string's bytes (its UTF-8,
	// after redaction).
	elidedString = "string"
	// elidedJSON: bytes and sha256 are of the value's canonical JSON text
	// (a member too large for the record, or the whole data).
	elidedJSON = "json"
)

// elidedObject is what replaces a value too long to store:
//
//	{"bytes": 10485760, "elided": "string", "prefix": "<first 1 KiB>", "sha256": "<hex>"}
//
// prefix is cut at a UTF-8 boundary at or before ElidedPrefixBytes. Since
// strings an agent passes (argv elements, paths) can only produce strings,
// an object in their place is always this marker, never agent text.
func elidedObject(kind, whole string) *object {
	sum := sha256.Sum256([]byte(whole))
	n := min(len(whole), ElidedPrefixBytes)
	for n > 0 && n < len(whole) && !utf8.RuneStart(whole[n]) {
		n--
	}
	// Members in canonical (byte) order.
	return &object{members: []member{
		{key: "bytes", val: json.Number(strconv.Itoa(len(whole)))},
		{key: "elided", val: kind},
		{key: "prefix", val: whole[:n]},
		{key: "sha256", val: hex.EncodeToString(sum[:])},
	}}
}

// shrink bounds canonical object text that is over MaxDataBytes: it elides
// the largest top-level members until the rest fits, and the whole object
// if that is not enough.
func shrink(canon []byte) []byte {
	whole := func() []byte { return appendCanonical(nil, elidedObject(elidedJSON, string(canon))) }
	v, err := parseJSON(canon)
	o, ok := v.(*object)
	if err != nil || !ok {
		return whole() // cannot happen: canon is a canonical object
	}
	sizes := make([]int, len(o.members))
	for i, m := range o.members {
		sizes[i] = len(appendCanonical(nil, m.val))
	}
	total := len(canon)
	order := make([]int, len(o.members))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(sizes[b], sizes[a]) })
	for _, i := range order {
		if total <= MaxDataBytes {
			break
		}
		enc := appendCanonical(nil, o.members[i].val)
		e := elidedObject(elidedJSON, string(enc))
		n := len(appendCanonical(nil, e))
		if n >= sizes[i] {
			break // the rest are small; eliding them would not help
		}
		o.members[i].val = e
		total += n - sizes[i]
	}
	if total > MaxDataBytes {
		return whole()
	}
	return appendCanonical(make([]byte, 0, total), o)
}
