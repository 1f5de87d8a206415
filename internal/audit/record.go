package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"time"
)

// Record kinds the daemon writes. Kind is a free-form string so later
// features can add their own; these are the ones the design names.
const (
	KindSandboxCreate   = "sandbox.create"
	KindSandboxExec     = "sandbox.exec"
	KindSandboxDestroy  = "sandbox.destroy"
	KindSandboxReap     = "sandbox.reap"
	KindSandboxLost     = "sandbox.lost"
	KindModelRequest    = "model.request"
	KindEgressAllow     = "egress.allow"
	KindEgressDeny      = "egress.deny"
	KindApprovalRequest = "approval.request"
	KindApprovalDecide  = "approval.decide"
)

// GenesisHash is the prev_hash of record 1.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// TimeLayout is how a record's time is written, both in the hash input and
// in the database: UTC, RFC 3339, always nine fractional digits. A fixed
// width (unlike time.RFC3339Nano, which trims zeros) keeps the string a pure
// function of the instant and makes the column sort in time order.
const TimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

// encodingTag starts every hash input. It names the encoding version so a
// future change of the encoding cannot produce a hash that collides with a
// record of this version.
const encodingTag = "ironclaw.audit.v1"

// Record is one entry of the audit log as stored.
type Record struct {
	Seq      int64           `json:"seq"`
	Time     time.Time       `json:"time"`
	Session  string          `json:"session,omitempty"`
	Actor    string          `json:"actor"`
	Kind     string          `json:"kind"`
	Data     json.RawMessage `json:"data"`
	PrevHash string          `json:"prev_hash"` // hex, 64 characters
	Hash     string          `json:"hash"`      // hex, 64 characters
	// MAC authenticates Seq and Hash with the log's key (see Key); "" for
	// a record written without a key (a legacy record).
	MAC string `json:"mac,omitempty"`
}

// recordJSON is Record's wire form: identical except that time is the exact
// string that was hashed, so an exported line can be verified without
// knowing how a JSON library formats times.
type recordJSON struct {
	Seq      int64           `json:"seq"`
	Time     string          `json:"time"`
	Session  string          `json:"session,omitempty"`
	Actor    string          `json:"actor"`
	Kind     string          `json:"kind"`
	Data     json.RawMessage `json:"data"`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
	MAC      string          `json:"mac,omitempty"`
}

// MarshalJSON writes the record with its time in TimeLayout.
func (r Record) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// json.Marshal would rewrite '<', '>' and '&' inside Data as \u003c and
	// so on: the same JSON value, but no longer the bytes that were hashed.
	enc.SetEscapeHTML(false)
	if len(r.Data) == 0 {
		r.Data = json.RawMessage("{}")
	}
	err := enc.Encode(recordJSON{
		Seq: r.Seq, Time: FormatTime(r.Time), Session: r.Session, Actor: r.Actor,
		Kind: r.Kind, Data: r.Data, PrevHash: r.PrevHash, Hash: r.Hash, MAC: r.MAC,
	})
	if err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Record) UnmarshalJSON(b []byte) error {
	var w recordJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339Nano, w.Time)
	if err != nil {
		return fmt.Errorf("audit: record %d: time: %w", w.Seq, err)
	}
	*r = Record{
		Seq: w.Seq, Time: t.UTC(), Session: w.Session, Actor: w.Actor,
		Kind: w.Kind, Data: w.Data, PrevHash: w.PrevHash, Hash: w.Hash, MAC: w.MAC,
	}
	return nil
}

// FormatTime renders t the way records store and hash it.
func FormatTime(t time.Time) string { return t.UTC().Format(TimeLayout) }

// ComputeHash returns the hash r should carry given its other fields,
// including PrevHash. It fails only if PrevHash is not 64 hex digits.
//
// The hash is SHA-256 over, in order:
//
//	prev_hash   the previous hash's 32 raw bytes (hex-decoded)
//	field("ironclaw.audit.v1")
//	seq         8 bytes, unsigned big-endian
//	field(time)     UTF-8 text in TimeLayout
//	field(session)  UTF-8, empty when the record belongs to no session
//	field(actor)    UTF-8
//	field(kind)     UTF-8
//	field(data)     the canonical JSON text of data (see canonicalJSON)
//
// where field(x) is len(x) as 8 bytes unsigned big-endian followed by x's
// bytes. Every variable-length part carries its length, so no two distinct
// records encode to the same bytes, and nothing depends on a library's
// formatting choices. prev_hash leads, as the design specifies
// (hash = sha256(prev_hash || encoding)); it is therefore not repeated in the
// encoding.
func (r Record) ComputeHash() (string, error) {
	var h hasher
	h.init()
	sum, err := h.sum(r.PrevHash, r.Seq, FormatTime(r.Time), r.Session, r.Actor, r.Kind, string(r.Data))
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(sum[:]), nil
}

// hasher computes record hashes reusing one SHA-256 state and buffer, so
// verifying a million records does not allocate a million of each.
type hasher struct {
	h   hash.Hash
	buf []byte
	out [sha256.Size]byte
}

func (h *hasher) init() {
	h.h = sha256.New()
	h.buf = make([]byte, 0, 512)
}

// sum hashes one record given as its stored strings. prevHex must be 64 hex
// digits.
func (h *hasher) sum(prevHex string, seq int64, tm, session, actor, kind, data string) ([sha256.Size]byte, error) {
	prev, err := decodeHash(prevHex)
	if err != nil {
		return prev, err
	}
	return h.sumRaw(&prev, seq, tm, session, actor, kind, data), nil
}

// decodeHash decodes a 64-digit hex hash.
func decodeHash(s string) ([sha256.Size]byte, error) {
	var out [sha256.Size]byte
	if len(s) != 2*sha256.Size {
		return out, fmt.Errorf("audit: hash %q is not %d hex digits", s, 2*sha256.Size)
	}
	if _, err := hex.Decode(out[:], []byte(s)); err != nil {
		return out, fmt.Errorf("audit: hash %q: %w", s, err)
	}
	return out, nil
}

// sumRaw is sum with the previous hash already decoded, which saves the
// verifier a hex decode per record: it has the previous record's hash as
// bytes from hashing that record.
func (h *hasher) sumRaw(prev *[sha256.Size]byte, seq int64, tm, session, actor, kind, data string) [sha256.Size]byte {
	b := h.buf[:0]
	b = append(b, prev[:]...)
	b = appendField(b, encodingTag)
	b = binary.BigEndian.AppendUint64(b, uint64(seq))
	b = appendField(b, tm)
	b = appendField(b, session)
	b = appendField(b, actor)
	b = appendField(b, kind)
	b = appendField(b, data)
	h.buf = b
	h.h.Reset()
	h.h.Write(b)
	h.h.Sum(h.out[:0])
	return h.out
}

func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}
