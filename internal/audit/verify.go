package audit

import (
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
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
	// ProblemBadMAC: the record's MAC does not match its seq and hash
	// under the key: it was rewritten (and the SHA-256 chain recomputed)
	// by someone without the key, or the key is not the log's.
	ProblemBadMAC Problem = "bad mac"
	// ProblemMACMissing: the record has no MAC although a record before
	// it has one; only records before the first keyed one may lack it
	// (the legacy prefix).
	ProblemMACMissing Problem = "mac missing"
	// ProblemCheckpoint: the log holds another record at BadSeq than the
	// checkpoint written then (CheckpointSeq): the log was rewritten at or
	// before BadSeq, by someone who also recomputed the MACs (holds the
	// key), or the checkpoint is forged.
	ProblemCheckpoint Problem = "checkpoint mismatch"
	// ProblemTruncated: a checkpoint names record CheckpointSeq, but the
	// log ends before it: BadSeq and the records after it were cut off.
	ProblemTruncated Problem = "truncated"
	// ProblemCheckpoints: the checkpoint file is missing, unreadable in
	// part, forged or contradicts itself (Reason says which); the log's
	// tail cannot be proven.
	ProblemCheckpoints Problem = "checkpoints"
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
	// For a checkpoint problem CheckpointSeq is the seq the checkpoint
	// names; for ProblemCheckpoints BadSeq may be 0 (no one record).
	BadSeq        int64   `json:"bad_seq,omitempty"`
	Problem       Problem `json:"problem,omitempty"`
	Reason        string  `json:"reason,omitempty"`
	CheckpointSeq int64   `json:"checkpoint_seq,omitempty"`

	// KeyID is the key MACs were checked with; "" means they were not
	// checked (no key given).
	KeyID string `json:"key_id,omitempty"`
	// Authenticated counts the checked records whose MAC was verified.
	Authenticated int64 `json:"authenticated"`
	// Legacy counts the records before the first keyed one: written
	// before the log had a key, they carry no MAC and are protected only
	// by the SHA-256 chain and the checkpoints.
	Legacy int64 `json:"legacy,omitempty"`
	// Checkpoints summarises the comparison with the checkpoint file.
	Checkpoints CheckpointSummary `json:"checkpoints"`
}

// CheckpointSummary is what Verify found in the checkpoint file.
type CheckpointSummary struct {
	// File is the checkpoint file read; "" means none was configured, so
	// a cut tail could not be detected.
	File string `json:"file,omitempty"`
	// Read counts the checkpoints in the file (one per seq); Matched those
	// the log was compared with and agreed with (a checkpoint before the first record
	// of a partial export cannot be compared).
	Read    int64 `json:"read"`
	Matched int64 `json:"matched"`
	// NewestSeq and NewestTime describe the newest checkpoint.
	NewestSeq  int64  `json:"newest_seq,omitempty"`
	NewestTime string `json:"newest_time,omitempty"`
	// Unproven counts the records after the newest checkpoint: until the
	// next checkpoint, their removal could not be detected.
	Unproven int64 `json:"unproven"`
}

func (r Result) String() string {
	var b strings.Builder
	if r.OK {
		fmt.Fprintf(&b, "ok: %d records, last seq %d, last hash %s", r.Checked, r.LastSeq, r.LastHash)
	} else {
		fmt.Fprintf(&b, "FAILED at seq %d (%s): %s; %d records before it are good", r.BadSeq, r.Problem, r.Reason, r.Checked)
	}
	if r.KeyID != "" {
		fmt.Fprintf(&b, "; %d authenticated with key %s", r.Authenticated, r.KeyID)
	} else {
		b.WriteString("; MACs not checked (no key)")
	}
	if r.Legacy > 0 {
		fmt.Fprintf(&b, "; %d legacy records (before the key) have no MAC", r.Legacy)
	}
	if c := r.Checkpoints; c.File != "" {
		fmt.Fprintf(&b, "; %d of %d checkpoints matched, newest at seq %d, %d records after it", c.Matched, c.Read, c.NewestSeq, c.Unproven)
	} else {
		b.WriteString("; no checkpoint file (a cut tail cannot be detected)")
	}
	return b.String()
}

// chain checks records one after another. It is shared by Verify (rows from
// the database) and VerifyExport (an export).
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

	mac *macer // nil: MACs are not checked
	// cps are the checkpoints by seq (read-only, shared by segments);
	// nil when there are none.
	cps map[int64]Checkpoint
	// keyed: a record with a MAC was seen. firstUnkeyed is the first
	// record without one (0: none); joining segments needs it.
	keyed        bool
	firstUnkeyed int64
}

func newChain(opts verifyOpts) *chain {
	c := &chain{nextSeq: 1, prevHash: GenesisHash, cps: opts.cps}
	c.h.init()
	c.res = Result{OK: true, FirstSeq: 1, LastHash: GenesisHash}
	if opts.key != nil {
		c.mac = opts.key.newMacer()
		c.res.KeyID = opts.key.ID()
	}
	return c
}

// verifyOpts is what a chain checks besides the hashes.
type verifyOpts struct {
	key *Key
	cps map[int64]Checkpoint
}

// check verifies one record given as its stored strings and reports whether
// it was good; on the first bad one it fills in c.res and the caller stops.
// The checks run in the order that names the cause best: a seq gap first
// (records deleted), then the link to the previous record (deleted, inserted
// or moved), then the record's own hash (edited), then its MAC (rewritten
// without the key), then the checkpoint at its seq (rewritten with it).
func (c *chain) check(seq int64, ts, session, actor, kind, data, prev, hash, mac string) bool {
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
	if mac == "" {
		if c.keyed {
			c.fail(seq, ProblemMACMissing, "the record has no MAC, but an earlier record has one: the record was rewritten without the key")
			return false
		}
		if c.firstUnkeyed == 0 {
			c.firstUnkeyed = seq
		}
		c.res.Legacy++
	} else {
		c.keyed = true
		if c.mac != nil {
			if string(c.mac.sum(seq, &sum)) != mac {
				c.fail(seq, ProblemBadMAC, "the record's MAC does not match: it was rewritten (the SHA-256 chain recomputed) by someone without the key, or the key "+c.res.KeyID+" is not this log's")
				return false
			}
			c.res.Authenticated++
		}
	}
	if c.cps != nil {
		if cp, ok := c.cps[seq]; ok {
			if cp.Hash != hash || cp.MAC != mac {
				c.res.CheckpointSeq = seq
				c.fail(seq, ProblemCheckpoint, fmt.Sprintf("the checkpoint written %s holds hash %s for this record, the log %s: the log was rewritten at or before this record", cp.Time, abbrev(cp.Hash), abbrev(hash)))
				return false
			}
			c.res.Checkpoints.Matched++
		}
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
// With the Log's key it checks every record's MAC (records before the
// first keyed one are counted as Result.Legacy); with its checkpoint file
// it compares the log with every checkpoint (see Checkpoint): a record
// that differs from its checkpoint, a checkpoint beyond the log's end, and
// a missing, unreadable or forged checkpoint file are reported. The
// checkpoint file is read before the log's end is, so checkpoints written
// during the run never look like a cut tail.
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
	vo, cs, err := loadVerifyOpts(ctx, l.opts.Key, l.opts.CheckpointFile)
	if err != nil {
		return Result{}, err
	}
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
			s.err = l.verifySegment(ctx, s, vo)
		}(&segs[i])
	}
	wg.Wait()

	// Join: the chain so far must continue into each segment's first record.
	total := newChain(vo)
	for i := range segs {
		s := &segs[i]
		if s.err != nil {
			return Result{}, s.err
		}
		if !total.join(s) {
			break
		}
	}
	finishCheckpoints(&total.res, cs, vo.key)
	return total.res, nil
}

// join adds segment s's outcome to the chain so far and reports whether
// checking goes on.
func (c *chain) join(s *segment) bool {
	r := s.c.res
	if s.rows == 0 {
		return true // a gap is reported at the next record present
	}
	if s.firstSeq != c.nextSeq {
		c.failSeq(c.nextSeq, s.firstSeq)
		return false
	}
	if !s.firstUnreadable && s.firstPrev != c.prevHash {
		c.failLink(s.firstSeq, s.firstPrev, c.prevHash)
		return false
	}
	// Legacy records may only lead the whole log. Within a segment a
	// record without a MAC after a keyed one fails there; so if the chain
	// so far is keyed, the segment's first unkeyed record leads it.
	if c.keyed && s.c.firstUnkeyed != 0 && (r.OK || s.c.firstUnkeyed < r.BadSeq) {
		c.fail(s.c.firstUnkeyed, ProblemMACMissing, "the record has no MAC, but an earlier record has one: the record was rewritten without the key")
		return false
	}
	c.res.Checked += r.Checked
	c.res.Authenticated += r.Authenticated
	c.res.Legacy += r.Legacy
	c.res.Checkpoints.Matched += r.Checkpoints.Matched
	c.keyed = c.keyed || s.c.keyed
	if r.Checked > 0 {
		c.res.LastSeq, c.res.LastHash = r.LastSeq, r.LastHash
	}
	if !r.OK {
		c.res.OK, c.res.BadSeq, c.res.Problem, c.res.Reason, c.res.CheckpointSeq = false, r.BadSeq, r.Problem, r.Reason, r.CheckpointSeq
		return false
	}
	c.nextSeq, c.prevHash = r.LastSeq+1, r.LastHash
	return true
}

// loadVerifyOpts reads the checkpoint file (if any) for a verification.
func loadVerifyOpts(ctx context.Context, key *Key, file string) (verifyOpts, *checkpointSet, error) {
	vo := verifyOpts{key: key}
	if file == "" {
		return vo, nil, nil
	}
	cs, err := readCheckpoints(ctx, file)
	if err != nil {
		return vo, nil, err
	}
	if len(cs.bySeq) > 0 {
		vo.cps = cs.bySeq
	}
	return vo, cs, nil
}

// finishCheckpoints fills in res.Checkpoints and, if the chain itself is
// good, reports what the checkpoint file reveals beyond the records it
// was compared with: a checkpoint past the log's end (a cut tail), a
// missing, unreadable, self-contradicting or forged file.
func finishCheckpoints(res *Result, cs *checkpointSet, key *Key) {
	if cs == nil {
		return
	}
	sum := &res.Checkpoints
	sum.File, sum.Read = cs.file, int64(len(cs.bySeq))
	if cs.read > 0 {
		sum.NewestSeq, sum.NewestTime = cs.newest.Seq, cs.newest.Time
		sum.Unproven = max(0, res.LastSeq-cs.newest.Seq)
	} else {
		sum.Unproven = res.LastSeq
	}
	if key != nil && res.Problem == ProblemBadMAC {
		for id := range cs.keyIDs {
			if id != "" && id != key.ID() {
				res.Reason += "; the checkpoints were made with key " + id + ": verify with that key file"
				break
			}
		}
	}
	if !res.OK {
		return
	}
	full := res.FirstSeq <= 1
	fail := func(seq int64, p Problem, cp int64, reason string) {
		res.OK, res.BadSeq, res.Problem, res.CheckpointSeq, res.Reason = false, seq, p, cp, reason
	}
	switch {
	case cs.missing:
		fail(0, ProblemCheckpoints, 0, fmt.Sprintf("the checkpoint file %s does not exist: it was deleted or moved, so a cut tail cannot be ruled out", cs.file))
		return
	case cs.bad != 0:
		fail(0, ProblemCheckpoints, 0, fmt.Sprintf("line %d of the checkpoint file %s is not a checkpoint: the file was edited", cs.bad, cs.file))
		return
	case cs.conflict != 0:
		fail(cs.conflict, ProblemCheckpoints, cs.conflict, fmt.Sprintf("two checkpoints for record %d disagree: the log was rewritten between them, or a checkpoint is forged", cs.conflict))
		return
	}
	// Forged checkpoints first: one past the end made without the key is
	// no evidence of a cut. Those at or before the end were compared with
	// authenticated records already.
	if key != nil {
		for _, c := range sortedCheckpoints(cs) {
			if c.MAC == "" || c.Seq <= res.LastSeq {
				continue
			}
			if want, err := key.MAC(c.Seq, c.Hash); err != nil || want != c.MAC {
				fail(c.Seq, ProblemCheckpoints, c.Seq, fmt.Sprintf("the checkpoint for record %d written %s has a MAC this key did not make: it is forged (or made with another key)", c.Seq, c.Time))
				return
			}
		}
	}
	if c := cs.newest; c.Seq > res.LastSeq {
		fail(res.LastSeq+1, ProblemTruncated, c.Seq, fmt.Sprintf("the checkpoint written %s names record %d, but the log ends at %d: records %d to %d were cut off", c.Time, c.Seq, res.LastSeq, res.LastSeq+1, c.Seq))
		return
	}
	if full {
		if c, ok := cs.bySeq[0]; ok {
			if c.Hash != GenesisHash {
				fail(0, ProblemCheckpoints, 0, "a checkpoint of the empty log holds a hash other than the genesis hash: it is forged")
				return
			}
			sum.Matched++
		}
	}
}

func sortedCheckpoints(cs *checkpointSet) []Checkpoint {
	out := make([]Checkpoint, 0, len(cs.bySeq))
	for _, c := range cs.bySeq {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Checkpoint) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
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

// verifySQL reads each record as one text value: its seq, the byte lengths
// of the other eight columns, then the columns themselves, back to back.
// Fetching one value instead of nine cuts the driver's per-row cost (each
// column fetch takes the connection's mutex and allocates; an int64 seq is
// boxed, another allocation), and the lengths, computed by SQLite from the
// stored values, make the split exact whatever the columns contain. A NULL
// anywhere makes the part after the seq NULL, which ifnull turns into an
// empty string that splitPacked refuses. The || chain is kept because
// concat() made Verify take 15-25% more CPU, likely because it allocates a
// result buffer per row in the driver's C allocator, shared by the readers,
// where the chain's result register keeps its buffer from row to row.
const verifySQL = `SELECT seq || ',' || ifnull(
	octet_length(time) || ',' || octet_length(session) || ',' || octet_length(actor) || ',' ||
	octet_length(kind) || ',' || octet_length(data) || ',' || octet_length(prev_hash) || ',' ||
	octet_length(hash) || ',' || octet_length(mac) || ':' ||
	time || session || actor || kind || data || prev_hash || hash || mac, '')
FROM audit_log WHERE seq > ? AND seq <= ? ORDER BY seq`

// packedFields is how many columns verifySQL packs after the seq.
const packedFields = 8

// splitSeq reads the leading "seq," of a verifySQL value and returns the
// seq and the rest. seq is the table's rowid, so SQLite always renders it
// as a decimal integer (negative ones included, which only a forged row
// has).
func splitSeq(s string) (seq int64, rest string, ok bool) {
	i, neg := 0, false
	if i < len(s) && s[i] == '-' {
		neg, i = true, 1
	}
	start := i
	var u uint64
	for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 19 {
		u = u*10 + uint64(s[i]-'0')
		i++
	}
	if i == start || i >= len(s) || s[i] != ',' || u > math.MaxInt64+1 || (!neg && u > math.MaxInt64) {
		return 0, "", false
	}
	seq = int64(u)
	if neg {
		seq = -seq
	}
	return seq, s[i+1:], true
}

// splitPacked undoes verifySQL's packing (after the seq) into time,
// session, actor, kind, data, prev_hash, hash and mac.
func splitPacked(s string) (f [packedFields]string, ok bool) {
	var lens [packedFields]int
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

func (l *Log) verifySegment(ctx context.Context, s *segment, vo verifyOpts) error {
	s.c = newChain(vo)
	s.c.trustFirst = true
	rows, err := l.read.QueryContext(ctx, verifySQL, s.lo, s.hi)
	if err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	defer rows.Close()
	var packed string
	for rows.Next() {
		if err := rows.Scan(&packed); err != nil {
			return fmt.Errorf("audit: verify: record after seq %d: %w", s.c.res.LastSeq, err)
		}
		seq, rest, ok := splitSeq(packed)
		if !ok {
			// Only a table rebuilt so that seq is no longer its rowid can
			// hold a seq that is not an integer.
			return fmt.Errorf("audit: verify: record after seq %d: the seq %.40q is not an integer", s.c.res.LastSeq, packed)
		}
		f, ok := splitPacked(rest)
		if !ok {
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
		if !s.c.check(seq, f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]) {
			return nil
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: verify: %w", err)
	}
	return nil
}

// VerifyOptions says what VerifyExport checks besides the SHA-256 chain.
type VerifyOptions struct {
	// Key checks every record's MAC; nil leaves MACs unchecked
	// (Result.KeyID is then "").
	Key *Key
	// CheckpointFile compares the export with the daemon's checkpoints.
	// Checkpoints before the export's first record cannot be compared;
	// one after its last record is reported as a cut tail, so compare a
	// full, fresh export.
	CheckpointFile string
}

// VerifyJSONLines is VerifyExport without a key or checkpoints: it checks
// the SHA-256 chain only.
func VerifyJSONLines(ctx context.Context, r io.Reader) (Result, error) {
	return VerifyExport(ctx, r, VerifyOptions{})
}

// VerifyExport verifies an export read from r (the output of Export)
// without a database: the chain, and with opts the MACs and checkpoints,
// exactly as Log.Verify does. Data is re-canonicalised before hashing, so
// an export that passed through a tool which re-indented or reordered its
// JSON still verifies. If the export starts after seq 1, its first record's
// prev_hash is trusted and Result.FirstSeq says where checking began.
func VerifyExport(ctx context.Context, r io.Reader, opts VerifyOptions) (Result, error) {
	vo, cs, err := loadVerifyOpts(ctx, opts.Key, opts.CheckpointFile)
	if err != nil {
		return Result{}, err
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	c := newChain(vo)
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
		if !c.check(rec.Seq, rec.Time, rec.Session, rec.Actor, rec.Kind, string(data), rec.PrevHash, rec.Hash, rec.MAC) {
			finishCheckpoints(&c.res, cs, vo.key)
			return c.res, nil
		}
	}
	if err := sc.Err(); err != nil {
		return Result{}, fmt.Errorf("audit: verify export: %w", err)
	}
	finishCheckpoints(&c.res, cs, vo.key)
	return c.res, nil
}
