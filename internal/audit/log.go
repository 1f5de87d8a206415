package audit

import (
	"github.com/ironclaw/ironclaw/internal/errdefs"

	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/store"
)

// ErrClosed is returned by Append after Close.
var ErrClosed = errdefs.New(errdefs.ErrUnavailable, "audit: log closed")

// Defaults for Options' zero values.
const (
	DefaultMaxBatch     = 1024
	DefaultQueue        = 4096
	DefaultPollInterval = time.Second
)

// Options tunes a Log. The zero value is ready to use.
type Options struct {
	// Redactor scrubs secrets from every entry. Nil means NewRedactor()
	// with no exact secrets: the patterns and secret-named keys still
	// apply, so a Log never writes unredacted data.
	Redactor *Redactor

	// MaxBatch caps how many records go into one transaction (default
	// 1024). Bigger batches share an fsync among more records but hold the
	// store's write connection longer.
	MaxBatch int

	// MaxDelay is how long the committer waits for more records after the
	// first one of a batch before committing (default 0). Zero is right for
	// most loads: records that arrive while a batch is being written and
	// fsynced form the next batch, so batches grow with load on their own.
	// A delay helps only when commits are so fast that appenders rarely
	// overlap one; with 64 appenders on a 2-core machine, 100-300µs cut
	// throughput by a third, because the appenders' CPU work then no longer
	// overlaps the fsync.
	MaxDelay time.Duration

	// Queue is how many appends may wait for the committer before Append
	// blocks (default 4096).
	Queue int

	// Clock stamps records; tests pass a fake one. Default time.Now.
	Clock func() time.Time

	// PollInterval is how often Follow and Wait re-read the table when no
	// append through this Log woke them: another process may be appending
	// to the same file (default 1s).
	PollInterval time.Duration
}

// Entry is what a caller logs. Data must marshal to a JSON object (see
// Redactor.Canonicalize); nil is {}.
type Entry struct {
	Session string
	Actor   string
	Kind    string
	Data    any
}

// Log appends to and reads the audit_log table of a store.
type Log struct {
	write  *sql.DB
	read   *sql.DB
	opts   Options
	redact *Redactor

	// mu makes "check closed, then send" atomic with respect to Close, so
	// no request can be sent after the committer has drained the queue.
	mu     sync.RWMutex
	closed bool
	reqs   chan *pending
	done   chan struct{} // closed when the committer has exited

	// Statements the committer runs for every batch, prepared once rather
	// than compiled per batch. inserts[i] adds insertChunks()[i] rows in one
	// statement.
	inserts  []*sql.Stmt
	headStmt *sql.Stmt

	// verifySegments, when > 0, fixes how many ranges Verify splits the log
	// into; tests use it to check the joining of ranges on small logs.
	verifySegments int

	// head is the newest record committed through this Log; changed is
	// closed (and replaced) whenever head moves, to wake Wait.
	headMu   sync.Mutex
	headSeq  int64
	headHash string
	changed  chan struct{}
}

// pending is one Append waiting for its batch to commit.
type pending struct {
	session, actor, kind string
	data                 []byte // canonical, redacted
	rec                  Record
	err                  error
	done                 chan struct{} // closed by the committer
}

// New starts a Log on st. It reads the newest record, so the chain continues
// where the previous process left it, and starts the committer goroutine;
// call Close to stop it.
func New(ctx context.Context, st *store.Store, opts Options) (*Log, error) {
	if st == nil {
		return nil, errors.New("audit: nil store")
	}
	if opts.Redactor == nil {
		opts.Redactor = NewRedactor()
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = DefaultMaxBatch
	}
	if opts.Queue <= 0 {
		opts.Queue = DefaultQueue
	}
	if opts.Clock == nil {
		opts.Clock = time.Now
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	l := &Log{
		write:   st.DB(),
		read:    st.ReadDB(),
		opts:    opts,
		redact:  opts.Redactor,
		reqs:    make(chan *pending, opts.Queue),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	seq, h, err := readHead(ctx, l.read)
	if err != nil {
		return nil, fmt.Errorf("audit: read last record: %w", err)
	}
	l.headSeq, l.headHash = seq, h
	if err := l.prepare(ctx); err != nil {
		l.closeStmts()
		return nil, err
	}
	go l.commitLoop()
	return l, nil
}

// queryRower is *sql.DB or *sql.Tx.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readHead returns the newest record's seq and hash, or 0 and GenesisHash
// for an empty log.
func readHead(ctx context.Context, q queryRower) (int64, string, error) {
	return scanHead(q.QueryRowContext(ctx, headSQL))
}

const headSQL = `SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1`

func scanHead(row *sql.Row) (int64, string, error) {
	var seq int64
	var h string
	err := row.Scan(&seq, &h)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, GenesisHash, nil
	}
	if err != nil {
		return 0, "", err
	}
	return seq, h, nil
}

// Append redacts and canonicalises e, queues it for the committer and waits
// until the transaction holding it has committed. The returned Record is
// exactly what was stored. It is safe to call from many goroutines.
//
// If ctx ends while the record is queued or being written, Append returns
// the context's error, and the record may or may not be in the log: it is
// not withdrawn from a batch already in flight.
func (l *Log) Append(ctx context.Context, e Entry) (Record, error) {
	if e.Actor == "" || e.Kind == "" {
		return Record{}, fmt.Errorf("audit: append: actor and kind are required (got actor %q, kind %q)", e.Actor, e.Kind)
	}
	if !utf8.ValidString(e.Session) || !utf8.ValidString(e.Actor) || !utf8.ValidString(e.Kind) {
		// JSON cannot carry invalid UTF-8, so such a record could not be
		// exported and verified byte for byte.
		return Record{}, errors.New("audit: append: session, actor and kind must be valid UTF-8")
	}
	data, err := l.redact.Canonicalize(e.Data)
	if err != nil {
		return Record{}, fmt.Errorf("audit: append %s: %w", e.Kind, err)
	}
	p := &pending{
		// Session and actor are identifiers, but a caller may build one from
		// a credential by mistake; they are hashed and stored too.
		session: l.redact.RedactString(e.Session),
		actor:   l.redact.RedactString(e.Actor),
		kind:    e.Kind,
		data:    data,
		done:    make(chan struct{}),
	}
	if err := ctx.Err(); err != nil {
		return Record{}, fmt.Errorf("audit: append %s: %w", e.Kind, err)
	}
	l.mu.RLock()
	if l.closed {
		l.mu.RUnlock()
		return Record{}, ErrClosed
	}
	select {
	case l.reqs <- p:
	case <-ctx.Done():
		l.mu.RUnlock()
		return Record{}, fmt.Errorf("audit: append %s: %w", e.Kind, ctx.Err())
	}
	l.mu.RUnlock()

	select {
	case <-p.done:
		if p.err != nil {
			return Record{}, p.err
		}
		return p.rec, nil
	case <-ctx.Done():
		return Record{}, fmt.Errorf("audit: append %s: %w (the record may still be committed)", e.Kind, ctx.Err())
	}
}

// Close stops accepting appends, waits until every queued record has been
// committed (or failed) and stops the committer. It does not close the
// store. It is safe to call more than once.
func (l *Log) Close() error {
	l.mu.Lock()
	if !l.closed {
		l.closed = true
		close(l.reqs)
	}
	l.mu.Unlock()
	<-l.done
	// Only the committer used the statements, and it has exited.
	return l.closeStmts()
}

// insertChunks returns the row counts of the multi-row INSERT statements a
// batch is written with, largest first; a batch of n rows uses the largest
// that fit, then smaller ones (63 rows: 3x16, 3x4, 3x1). One statement per
// 64 rows instead of 64 statements saved about a quarter of the committer's
// time per batch: each Exec through database/sql and the driver has a fixed
// cost of a few microseconds. 64 x 8 parameters is far below SQLite's limit
// on bound parameters.
func insertChunks() [4]int { return [...]int{64, 16, 4, 1} }

func (l *Log) prepare(ctx context.Context) error {
	const row = `(?, ?, ?, ?, ?, ?, ?, ?)`
	for _, n := range insertChunks() {
		q := insertSQL + strings.Repeat(", "+row, n-1)
		st, err := l.write.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("audit: prepare insert: %w", err)
		}
		l.inserts = append(l.inserts, st)
	}
	st, err := l.write.PrepareContext(ctx, headSQL)
	if err != nil {
		return fmt.Errorf("audit: prepare head query: %w", err)
	}
	l.headStmt = st
	return nil
}

func (l *Log) closeStmts() error {
	var errs []error
	for _, st := range l.inserts {
		errs = append(errs, st.Close())
	}
	if l.headStmt != nil {
		errs = append(errs, l.headStmt.Close())
	}
	return errors.Join(errs...)
}

// commitLoop is the single goroutine that writes records. It owns seq
// assignment and hash chaining, which is what keeps the chain gap-free
// without a lock around each append.
func (l *Log) commitLoop() {
	defer close(l.done)
	batch := make([]*pending, 0, l.opts.MaxBatch)
	var timer *time.Timer
	for {
		p, ok := <-l.reqs
		if !ok {
			return
		}
		batch = append(batch[:0], p)
		open := l.fill(&batch, &timer)
		l.commit(batch)
		for i := range batch {
			batch[i] = nil // let finished requests be collected
		}
		if !open {
			// fill saw the queue closed, and a closed channel reports that
			// only once it is empty: every queued Append has its answer.
			return
		}
	}
}

// fill adds queued requests to batch until it is full, the queue is empty
// (and MaxDelay, if any, has passed) or the queue is closed. It reports
// whether the queue is still open.
func (l *Log) fill(batch *[]*pending, timer **time.Timer) bool {
	var deadline <-chan time.Time
	if l.opts.MaxDelay > 0 {
		if *timer == nil {
			*timer = time.NewTimer(l.opts.MaxDelay)
		} else {
			(*timer).Reset(l.opts.MaxDelay)
		}
		deadline = (*timer).C
		defer (*timer).Stop()
	}
	for len(*batch) < l.opts.MaxBatch {
		select {
		case p, ok := <-l.reqs:
			if !ok {
				return false
			}
			*batch = append(*batch, p)
			continue
		default:
		}
		if deadline == nil {
			return true
		}
		select {
		case p, ok := <-l.reqs:
			if !ok {
				return false
			}
			*batch = append(*batch, p)
		case <-deadline:
			return true
		}
	}
	return true
}

// commit writes batch in one transaction and then wakes its appenders.
//
// The head of the chain is read inside the transaction, which on the store's
// writer begins IMMEDIATE and so holds SQLite's write lock: even if another
// process appends to the same file, this batch chains onto the true last
// record. On any failure the transaction rolls back and every request in the
// batch gets the error; nothing is kept in memory, so the next batch starts
// from what is really committed.
func (l *Log) commit(batch []*pending) {
	err := l.writeBatch(batch)
	if err != nil {
		for _, p := range batch {
			p.err = err
			close(p.done)
		}
		return
	}
	last := batch[len(batch)-1].rec
	l.headMu.Lock()
	l.headSeq, l.headHash = last.Seq, last.Hash
	close(l.changed)
	l.changed = make(chan struct{})
	l.headMu.Unlock()
	for _, p := range batch {
		close(p.done)
	}
}

const insertSQL = `INSERT INTO audit_log (seq, time, session, actor, kind, data, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`

func (l *Log) writeBatch(batch []*pending) (err error) {
	// The committer's work must not be cut short by one appender's context:
	// the batch holds other appenders' records too.
	ctx := context.Background()
	tx, err := l.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: begin batch: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
		}
	}()
	seq, prev, err := scanHead(tx.StmtContext(ctx, l.headStmt).QueryRowContext(ctx))
	if err != nil {
		return fmt.Errorf("audit: read chain head: %w", err)
	}

	// A stored head that is not a hash means the table was tampered with;
	// chaining onto it would only bury that, so appends stop until someone
	// looks (Verify names the record).
	prevRaw, err := decodeHash(prev)
	if err != nil {
		return fmt.Errorf("audit: last record %d: %w", seq, err)
	}
	var h hasher
	h.init()
	args := make([]any, 0, 8*len(batch))
	data := make([]string, len(batch))
	for i, p := range batch {
		seq++
		t := l.opts.Clock().UTC()
		ts := t.Format(TimeLayout)
		data[i] = string(p.data)
		prevRaw = h.sumRaw(&prevRaw, seq, ts, p.session, p.actor, p.kind, data[i])
		hs := hex.EncodeToString(prevRaw[:])
		// Round(0) drops the monotonic clock reading, which the stored
		// string cannot carry, so the returned Record equals what Tail
		// reads back.
		p.rec = Record{
			Seq: seq, Time: t.Round(0), Session: p.session, Actor: p.actor, Kind: p.kind,
			Data: p.data, PrevHash: prev, Hash: hs,
		}
		args = append(args, seq, ts, p.session, p.actor, p.kind, data[i], prev, hs)
		prev = hs
	}
	for i, n := range insertChunks() {
		for len(args) >= 8*n {
			// Bound to the transaction's connection, the writer's only one,
			// so this reuses the statement prepared in New.
			if _, err := tx.StmtContext(ctx, l.inserts[i]).ExecContext(ctx, args[:8*n]...); err != nil {
				return fmt.Errorf("audit: insert records %d to %d: %w", batch[0].rec.Seq, seq, err)
			}
			args = args[8*n:]
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit: commit batch: %w", err)
	}
	return nil
}

// LastSeq returns the seq of the newest record this Log has committed (or
// found at New). Another process appending to the same file is not seen
// here; Tail sees it.
func (l *Log) LastSeq() int64 {
	seq, _ := l.Head()
	return seq
}

// Head returns the seq and hash of the newest record this Log has committed
// (or found at New); 0 and GenesisHash for an empty log. Publishing the head
// elsewhere from time to time (a log line, a file on another host) is what
// lets Verify's Result.LastHash reveal a truncated log.
func (l *Log) Head() (int64, string) {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.headSeq, l.headHash
}

// Wait blocks until the log holds a record with seq > afterSeq, ctx ends, or
// the Log is closed. An append through this Log wakes it at once; appends by
// other processes are noticed within Options.PollInterval.
func (l *Log) Wait(ctx context.Context, afterSeq int64) error {
	ticker := time.NewTicker(l.opts.PollInterval)
	defer ticker.Stop()
	for {
		l.headMu.Lock()
		seq, ch := l.headSeq, l.changed
		l.headMu.Unlock()
		if seq > afterSeq {
			return nil
		}
		select {
		case <-ch:
		case <-l.done:
			return ErrClosed
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
			n, _, err := readHead(ctx, l.read)
			if err != nil {
				return fmt.Errorf("audit: wait: %w", err)
			}
			if n > afterSeq {
				return nil
			}
		}
	}
}
