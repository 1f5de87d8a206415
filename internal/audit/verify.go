package audit

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"sync"
)

// Problem says how the first bad record is bad.
type Problem string

const (
	// ProblemEdited: the record's stored hash does not match its contents;
	// a field was changed after it was written.
	ProblemEdited Problem = "edited"
	// ProblemBrokenChain: the record's prev_hash is not the hash of the
	// record before it, so the records around it were deleted, inserted or
	// reordered (or the record before was edited and re-hashed).
	ProblemBrokenChain Problem = "broken chain"
	// ProblemMissing: seq numbers jump; BadSeq is the first missing one,
	// so records were deleted.
	ProblemMissing Problem = "missing"
)

// Result is the outcome of a verification. Tampering is reported here, not
// as an error; Verify returns an error only when it could not read the log.
type Result struct {
	OK bool `json:"ok"`
	// Checked counts the records that passed every check: all of them when
	// OK, those before BadSeq otherwise.
	Checked int64 `json:"checked"`
	// FirstSeq is the seq verification started at: 1 for the database; for
	// an export taken after some seq, the first exported one, whose
	// prev_hash is then taken on trust.
	FirstSeq int64 `json:"first_seq,omitempty"`
	// LastSeq and LastHash are the newest good record (0 and GenesisHash
	// if none). A hash chain cannot reveal that its newest records were cut
	// off; comparing these with a copy kept elsewhere can.
	LastSeq  int64  `json:"last_seq"`
	LastHash string `json:"last_hash"`
	// BadSeq, Problem and Reason describe the first bad record when !OK.
	BadSeq  int64   `json:"bad_seq,omitempty"`
	Problem Problem `json:"problem,omitempty"`
	Reason  string  `json:"reason,omitempty"`
}

func (r Result) String() string {
	if r.OK {
		return fmt.Sprintf("ok: %d records, last seq %d, last hash %s", r.Checked, r.LastSeq, r.LastHash)
	}
	return fmt.Sprintf("FAILED at seq %d (%s): %s; %d records before it are good", r.BadSeq, r.Problem, r.Reason, r.Checked)
}

// chain checks records one after another. It is shared by Verify (rows from
// the database) and VerifyJSONLines (an export).
type chain struct {
	h        hasher
	nextSeq  int64             // the seq the next record must have
	prevHash string            // the hash the next record's prev_hash must equal
	prevRaw  [sha256.Size]byte // prevHash decoded
	// trustFirst: take the first record's seq and prev_hash as given. Used
	// for a partial export, and by Verify's segments, whose first record's
	// link is checked when the segments are joined.
	trustFirst bool
	hexBuf     [2 * sha256.Size]byte
	res        Result
}

func newChain() *chain {
	c := &chain{nextSeq: 1, prevHash: GenesisHash}
	c.h.init()
	c.res = Result{OK: true, FirstSeq: 1, LastHash: GenesisHash}
	return c
}

// check verifies one record given as its stored strings and reports whether
// it was good; on the first bad one it fills in c.res and the caller stops.
// The checks run in the order that names the cause best: a seq gap first
// (records deleted), then the link to the previous record (deleted, inserted
// or moved), then the record's own hash (edited).
func (c *chain) check(seq int64, ts, session, actor, kind, data, prev, hash string) bool {
	if c.trustFirst {
		c.trustFirst = false
		raw, err := decodeHash(prev)
		if err != nil {
			c.fail(seq, ProblemBrokenChain, fmt.Sprintf("prev_hash is malformed: %v", err))
			return false
		}
		c.nextSeq, c.prevHash, c.prevRaw = seq, prev, raw
		c.res.FirstSeq = seq
	}
	switch {
	case seq != c.nextSeq:
		c.failSeq(c.nextSeq, seq)
		return false
	case prev != c.prevHash:
		c.failLink(seq, prev, c.prevHash)
		return false
	}
	sum := c.h.sumRaw(&c.prevRaw, seq, ts, session, actor, kind, data)
	hex.Encode(c.hexBuf[:], sum[:])
	if string(c.hexBuf[:]) != hash {
		c.fail(seq, ProblemEdited, fmt.Sprintf("stored hash %s does not match the record's contents (%s): the record was edited", abbrev(hash), abbrev(string(c.hexBuf[:]))))
		return false
	}
	c.res.Checked++
	c.res.LastSeq = seq
	c.res.LastHash = hash
	c.nextSeq = seq + 1
	c.prevHash = hash
	c.prevRaw = sum
	return true
}

// unreadable records that record seq's fields could not be read: after the
// seq check, it is reported as edited.
func (c *chain) unreadable(seq int64) {
	if c.trustFirst {
		c.trustFirst = false
		c.nextSeq = seq
	}
	if seq != c.nextSeq {
		c.failSeq(c.nextSeq, seq)
		return
	}
	c.fail(seq, ProblemEdited, "a field of the record is NULL or unreadable: the table was rebuilt and the record edited")
}

// failSeq reports that seq came where want was expected.
func (c *chain) failSeq(want, seq int64) {
	if seq < want {
		c.fail(want, ProblemBrokenChain, fmt.Sprintf("found seq %d where %d was expected (records reordered or duplicated)", seq, want))
		return
	}
	missing := fmt.Sprintf("record %d is", want)
	if seq-1 > want {
		missing = fmt.Sprintf("records %d to %d are", want, seq-1)
	}
	c.fail(want, ProblemMissing, fmt.Sprintf("%s missing (deleted); the next record present is %d", missing, seq))
}

// failLink reports that record seq's prev_hash is not want.
func (c *chain) failLink(seq int64, prev, want string) {
	what := "the previous record's hash"
	if want == GenesisHash && seq == 1 {
		what = "the genesis hash"
	}
	c.fail(seq, ProblemBrokenChain, fmt.Sprintf("prev_hash %s is not %s %s: records before it were deleted, inserted or reordered", abbrev(prev), what, abbrev(want)))
}

func (c *chain) fail(seq int64, p Problem, reason string) {
	c.res.OK = false
	c.res.BadSeq = seq
	c.res.Problem = p
	c.res.Reason = reason
}

func abbrev(h string) string {
	if len(h) > 16 {
		return h[:16] + "…"
	}
	return h
}

// minSegment is the fewest records worth a goroutine and a connection of
// their own in Verify.
const minSegment = 50_000

// Verify recomputes the chain from seq 1 to the newest record present when
// it starts and reports the first bad record, if any. Records appended
// meanwhile are left for the next run.
//
// Each record's hash is recomputed from its stored fields exactly as they
// are in the table; the data column is not re-canonicalised, since the log
// only ever stores canonical text and any other text is itself an edit.
//
// The work is split into contiguous seq ranges checked in parallel (one per
// CPU, each streaming its rows over its own read connection and holding
// one record at a time); reading rows through the driver costs more than
// hashing them, and one core cannot do a million in the time budget. A
// range trusts its first record's link; the ranges are then joined in
// order, checking each range's first record against the previous range's
// last, so the result, down to the reported first bad record and reason, is
// the one a single pass in seq order would give. This is sound because rows
// up to the newest seq read at the start never change in a healthy log
// (appends only add higher seqs).
func (l *Log) Verify(ctx context.Context) (Result, error) {
	var last int64
	if err := l.read.QueryRowContext(ctx, `SELECT ifnull(max(seq), 0) FROM audit_log`).Scan(&last); err != nil {
		return Result{}, fmt.Errorf("audit: verify: %w", err)
	}
	n := int64(runtime.GOMAXPROCS(0))
	n = min(n, max(1, last/minSegment))
	if l.verifySegments > 0 {
		n = int64(l.verifySegments)
	}
	segs := make([]segment, n)
	var wg sync.WaitGroup
	for i := range segs {
		segs[i].lo, segs[i].hi = last*int64(i)/n, last*int64(i+1)/n
		if i == 0 {
			segs[i].lo = math.MinInt64 // rows with seq <= 0 are forged; see them
		}

		wg.Add(1)
		go func(s *segment) {
			defer wg.Done()
			s.err = l.verifySegment(ctx, s)
		}(&segs[i])
	}
	wg.Wait()

	// Join: the chain so far must continue into each segment's first record.
	total := newChain()
	for i := range segs {
		s := &segs[i]
		if s.err != nil {
			return Result{}, s.err
		}
		r := s.c.res
		if s.rows == 0 {
			continue // a gap is reported at the next record present
		}
		if s.firstSeq != total.nextSeq {
			total.failSeq(total.nextSeq, s.firstSeq)
			return total.res, nil
		}
		if !s.firstUnreadable && s.firstPrev != total.prevHash {
			total.failLink(s.firstSeq, s.firstPrev, total.prevHash)
			return total.res, nil
		}
		total.res.Checked += r.Checked
		if r.Checked > 0 {
			total.res.LastSeq, total.res.LastHash = r.LastSeq, r.LastHash
		}
		if !r.OK {
			total.res.OK, total.res.BadSeq, total.res.Problem, total.res.Reason = false, r.BadSeq, r.Problem, r.Reason
			return total.res, nil
		}
		total.nextSeq, total.prevHash = r.LastSeq+1, r.LastHash
	}
	return total.res, nil
}

// segment is one seq range (lo, hi] of a Verify run and its outcome.
type segment struct {
	lo, hi          int64
	c               *chain
	rows            int64
	firstSeq        int64
	firstPrev       string
	firstUnreadable bool // the first record's fields could not be read
	err             error
}

// verifySQL reads each record as its seq and one text value: the byte
// lengths of the other seven columns, then the columns themselves, back to
// back. Fetching one value instead of seven roughly halves the driver's
// per-row cost (each column fetch takes the connection's mutex and
// allocates), and the lengths, computed by SQLite from the stored values,
// make the split exact whatever the columns contain. A NULL anywhere makes
// the whole value NULL.
const verifySQL = `SELECT seq,
	octet_length(time) || ',' || octet_length(session) || ',' || octet_length(actor) || ',' ||
	octet_length(kind) || ',' || octet_length(data) || ',' || octet_length(prev_hash) || ',' ||
	octet_length(hash) || ':' ||
	time || session || actor || kind || data || prev_hash || hash
FROM audit_log WHERE seq > ? AND seq <= ? ORDER BY seq`

// splitPacked undoes verifySQL's packing into time, session, actor, kind,
// data, prev_hash and hash.
func splitPacked(s string) (f [7]string, ok bool) {
	var lens [7]int
	i := 0
	for k := range lens {
		n, start := 0, i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 12 {
			n = n*10 + int(s[i]-'0')
			i++
		}
		sep := byte(',')
		if k == len(lens)-1 {
			sep = ':'
		}
		if i == start || i >= len(s) || s[i] != sep {
			return f, false
		}
		i++
		lens[k] = n
	}
	for k, n := range lens {
		if n > len(s)-i {
			return f, false
		}
		f[k] = s[i : i+n]
		i += n
	}
	return f, i == len(s)
}

func (l *Log) verifySegment(ctx context.Context, s *segment) error {
	s.c = newChain()
	s.c.trustFirst = true
	rows, err := l.read.QueryContext(ctx, verifySQL, s.lo, s.hi)
	if err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	defer rows.Close()
	var (
		seq    int64
		packed sql.NullString
	)
	for rows.Next() {
		if err := rows.Scan(&seq, &packed); err != nil {
			return fmt.Errorf("audit: verify: record after seq %d: %w", s.c.res.LastSeq, err)
		}
		f, ok := splitPacked(packed.String)
		if !packed.Valid || !ok {
			// Only a table rebuilt without its NOT NULL constraints can
			// hold this. Its prev_hash is unknown, so only the seq can be
			// checked before reporting it as edited.
			if s.rows == 0 {
				s.firstSeq, s.firstUnreadable = seq, true
			}
			s.rows++
			s.c.unreadable(seq)
			return nil
		}
		if s.rows == 0 {
			s.firstSeq, s.firstPrev = seq, f[5]
		}
		s.rows++
		if !s.c.check(seq, f[0], f[1], f[2], f[3], f[4], f[5], f[6]) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	return nil
}

// VerifyJSONLines verifies an export read from r (the output of Export)
// without a database. Data is re-canonicalised before hashing, so an export
// that passed through a tool which re-indented or reordered its JSON still
// verifies. If the export starts after seq 1, its first record's prev_hash
// is trusted and Result.FirstSeq says where checking began.
func VerifyJSONLines(ctx context.Context, r io.Reader) (Result, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	c := newChain()
	first := true
	line := 0
	for sc.Scan() {
		line++
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
		}
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec recordJSON
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return Result{}, fmt.Errorf("audit: verify export: line %d: %w", line, err)
		}
		data, err := CanonicalJSON(rec.Data)
		if err != nil {
			return Result{}, fmt.Errorf("audit: verify export: line %d: %w", line, err)
		}
		if first {
			first = false
			// A partial export starts after seq 1; its first link cannot
			// be checked.
			c.trustFirst = rec.Seq != 1
		}
		if !c.check(rec.Seq, rec.Time, rec.Session, rec.Actor, rec.Kind, string(data), rec.PrevHash, rec.Hash) {
			return c.res, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, fmt.Errorf("audit: verify export: %w", err)
	}
	return c.res, nil
}
