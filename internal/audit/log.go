package audit

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Errors of Append. Each Append that fails returns one of them (wrapping
// the cause), so a caller can tell "the record is not durable, do not act"
// apart from its own errors, and the API renders each by its class.
var (
	// ErrClosed: Append after Close.
	ErrClosed = errdefs.New(errdefs.ErrUnavailable, "audit: log closed")
	// ErrStorageFull: the disk holding the database is full (SQLITE_FULL,
	// ENOSPC, EDQUOT). The record was not written, the chain head is
	// unchanged, and appends work again once there is space.
	ErrStorageFull = errdefs.New(errdefs.ErrInsufficientStorage, "audit: the disk is full; the record was not written")
	// ErrNotWritten: any other failure to make a record durable.
	ErrNotWritten = errdefs.New(errdefs.ErrUnavailable, "audit: the record could not be written")
	// ErrChangeRefused: the store change given to AppendWith failed, so
	// neither it nor its record was written; the log itself is fine (the
	// other records of the batch were committed).
	ErrChangeRefused = errdefs.New(errdefs.ErrUnavailable, "audit: the change to commit with the record failed; neither was written")
)

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

	// Key, if set, authenticates every record appended (Record.MAC) and
	// is what Verify checks MACs with. Nil writes unkeyed records, which
	// New refuses once the log holds keyed ones. See Key.
	Key *Key

	// CheckpointFile, if set, is the JSON-lines file (outside the data
	// directory) the chain head is appended to, fsynced: at New, every
	// CheckpointEvery records, every CheckpointInterval while records
	// arrive, and at Close. Verify reads it. See Checkpoint.
	CheckpointFile string
	// CheckpointURL, if set, receives every checkpoint as a JSON POST
	// (best effort, no redirects followed; a slow receiver only ever has
	// the newest checkpoint pending). CheckpointClient overrides the HTTP
	// client (default: 10s timeout).
	CheckpointURL    string
	CheckpointClient *http.Client
	// CheckpointEvery (default 256 records) and CheckpointInterval
	// (default 30s) say how often checkpoints are written.
	CheckpointEvery    int
	CheckpointInterval time.Duration

	// RepeatWindow is the window of AppendRepeated (default
	// DefaultRepeatWindow).
	RepeatWindow time.Duration

	// Logf receives warnings: a checkpoint that could not be written, a
	// log that disagrees with its checkpoints at start. Nil discards them.
	Logf func(format string, args ...any)
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
	dbPath string
	opts   Options
	redact *Redactor
	mac    *macer // the committer's; nil without a key

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

	// Scratch state of the committer, reused across batches: the record
	// hasher, a hex buffer and the INSERT arguments.
	hash   hasher
	hexBuf [2 * sha256.Size]byte
	args   []any

	// verifySegments, when > 0, fixes how many ranges Verify splits the log
	// into; tests use it to check the joining of ranges on small logs.
	verifySegments int

	// head is the newest record committed through this Log; changed is
	// closed (and replaced) whenever head moves, to wake Wait. cpSeq is
	// the seq of the newest checkpoint written.
	headMu   sync.Mutex
	headSeq  int64
	headHash string
	headMAC  string
	changed  chan struct{}
	// headStale makes the committer's next batch read the head from the
	// database (see commit); only the committer uses it.
	headStale bool
	cpSeq     int64

	// Checkpointing (nil/unused without CheckpointFile and CheckpointURL).
	cpMu    sync.Mutex // serialises checkpoint writes
	cpFile  *checkpointFile
	webhook *webhookSink
	cpKick  chan struct{} // capacity 1: CheckpointEvery records passed
	cpStop  chan struct{}
	cpDone  chan struct{}

	repeats *repeater
}

// pending is one Append waiting for its batch to commit.
type pending struct {
	session, actor, kind string
	data                 []byte // canonical, redacted, bounded
	// args are session, actor, kind and data as the INSERT's arguments,
	// made by the appender: converting a string to an interface allocates,
	// and the appenders' goroutines run beside the committer, whose work
	// per record is what bounds throughput.
	args [4]any
	rec  Record
	err  error
	done chan struct{} // closed by the committer
	// lazy: nobody waits for this record (Intent.EndQueued), so the
	// committer may hold it up to lazyDelay for a record somebody waits
	// for, and commit both with one fsync.
	lazy bool
	// change, if set, is AppendWith's store change, run in the batch's
	// transaction before the records are chained.
	change Change
	// followers are records queued with this one (AppendWithIntent): the
	// committer writes them right after it, in the same batch, and they
	// are refused with it. They have no change and no followers of their
	// own.
	followers []*pending
}

// Change is a store change committed in the same transaction as its
// record (AppendWith). It runs on the committer's goroutine, inside the
// batch's transaction on the store's writer: it must only run a few
// statements on tx, and never wait for anything else (an Append from it
// would wait for itself). It may run more than once: when another change
// of the same batch fails, the batch is rolled back and written again, so
// it must have no effect outside tx.
type Change func(ctx context.Context, tx *sql.Tx) error

// lazyDelay is how long a batch of only lazy records waits for company.
// An action's result record then shares the fsync of the next action's
// intent instead of paying one of its own; if the daemon dies meanwhile,
// the result is lost and its intent says the action may have happened.
const lazyDelay = 20 * time.Millisecond

// maxIdentifier bounds Entry.Session, Actor and Kind: they are names the
// daemon chooses, never agent text, so anything longer is a bug.
const maxIdentifier = 256

// New starts a Log on st. It reads the newest record, so the chain continues
// where the previous process left it, and starts the committer goroutine;
// call Close to stop it.
//
// With Options.Key, New refuses a log whose newest record's MAC does not
// match the key (a wrong key file, or an edited record); without one it
// refuses a log that already holds keyed records. With
// Options.CheckpointFile, it refuses to start when the file is missing
// although the log has records (it was deleted: recreating it would hide
// that; an operator starting checkpoints on an old log creates the file
// empty), warns through Logf when the log disagrees with the newest
// checkpoint (Verify reports it in detail), and writes a "start" checkpoint
// before returning; failing to write it is an error.
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
	if opts.CheckpointEvery <= 0 {
		opts.CheckpointEvery = DefaultCheckpointEvery
	}
	if opts.CheckpointInterval <= 0 {
		opts.CheckpointInterval = DefaultCheckpointInterval
	}
	if opts.RepeatWindow <= 0 {
		opts.RepeatWindow = DefaultRepeatWindow
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	l := &Log{
		write:   st.DB(),
		read:    st.ReadDB(),
		dbPath:  st.Path(),
		opts:    opts,
		redact:  opts.Redactor,
		reqs:    make(chan *pending, opts.Queue),
		done:    make(chan struct{}),
		changed: make(chan struct{}),
	}
	if opts.Key != nil {
		l.mac = opts.Key.newMacer()
	}
	seq, h, mac, err := readHead(ctx, l.read)
	if err != nil {
		return nil, fmt.Errorf("audit: read last record: %w", err)
	}
	if err := l.checkHeadKey(seq, h, mac); err != nil {
		return nil, err
	}
	l.headSeq, l.headHash, l.headMAC = seq, h, mac
	if err := l.openCheckpoints(ctx, mac != ""); err != nil {
		return nil, err
	}
	if err := l.prepare(ctx); err != nil {
		l.closeStmts()
		l.closeCheckpoints()
		return nil, err
	}
	l.repeats = newRepeater(l)
	go l.commitLoop()
	if l.cpKick != nil {
		go l.checkpointLoop()
	}
	return l, nil
}

// checkHeadKey checks the newest record against the configured key.
func (l *Log) checkHeadKey(seq int64, h, mac string) error {
	k := l.opts.Key
	switch {
	case mac == "":
		return nil // empty, or legacy records only: keying starts here
	case k == nil:
		return errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("audit: the log is keyed (record %d has a MAC); open it with its key", seq))
	}
	want, err := k.MAC(seq, h)
	if err != nil {
		return fmt.Errorf("audit: last record %d: %w", seq, err)
	}
	if want != mac {
		return errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("audit: the key %s does not authenticate the log's newest record %d: a wrong key file, or the record was rewritten (run verify with the right key)", k.ID(), seq))
	}
	return nil
}

// queryRower is *sql.DB or *sql.Tx.
type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// readHead returns the newest record's seq, hash and MAC, or 0,
// GenesisHash and "" for an empty log.
func readHead(ctx context.Context, q queryRower) (int64, string, string, error) {
	return scanHead(q.QueryRowContext(ctx, headSQL))
}

const headSQL = `SELECT seq, hash, mac FROM audit_log ORDER BY seq DESC LIMIT 1`

func scanHead(row *sql.Row) (int64, string, string, error) {
	var seq int64
	var h, mac string
	err := row.Scan(&seq, &h, &mac)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, GenesisHash, "", nil
	}
	if err != nil {
		return 0, "", "", err
	}
	return seq, h, mac, nil
}

// Append redacts, bounds and canonicalises e, queues it for the committer
// and waits until the transaction holding it has committed: when Append
// returns nil, the record is durable (it survives kill -9 and power loss).
// The returned Record is exactly what was stored. It is safe to call from
// many goroutines.
//
// Any error means the caller must treat the record as not written: a full
// disk is ErrStorageFull (class errdefs.ErrInsufficientStorage), any other
// write failure ErrNotWritten, a closed log ErrClosed. An action whose
// record must exist before it happens should use Begin instead.
//
// Data is bounded here, for every caller (see Redactor.Canonicalize):
// strings over MaxStringBytes are stored as a prefix, their byte length and
// their SHA-256; data still over MaxDataBytes has its largest members
// replaced the same way.
//
// If ctx ends while the record is queued or being written, Append returns
// the context's error, and the record may or may not be in the log: it is
// not withdrawn from a batch already in flight.
func (l *Log) Append(ctx context.Context, e Entry) (Record, error) {
	data, err := l.checkEntry(e)
	if err != nil {
		return Record{}, err
	}
	return l.appendCanonical(ctx, e, data)
}

// checkEntry checks e's identifiers and returns its data redacted,
// bounded and canonical.
func (l *Log) checkEntry(e Entry) ([]byte, error) {
	if e.Actor == "" || e.Kind == "" {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("audit: append: actor and kind are required (got actor %q, kind %q)", e.Actor, e.Kind))
	}
	if !utf8.ValidString(e.Session) || !utf8.ValidString(e.Actor) || !utf8.ValidString(e.Kind) {
		// JSON cannot carry invalid UTF-8, so such a record could not be
		// exported and verified byte for byte.
		return nil, errdefs.New(errdefs.ErrInvalidArgument, "audit: append: session, actor and kind must be valid UTF-8")
	}
	if len(e.Session) > maxIdentifier || len(e.Actor) > maxIdentifier || len(e.Kind) > maxIdentifier {
		return nil, errdefs.New(errdefs.ErrInvalidArgument, fmt.Sprintf("audit: append: session, actor and kind are limited to %d bytes", maxIdentifier))
	}
	data, err := l.redact.Canonicalize(e.Data)
	if err != nil {
		return nil, fmt.Errorf("audit: append %s: %w", e.Kind, err)
	}
	return data, nil
}

// AppendWith is Append with a change to the store (say, a row the record
// is about) made in the same transaction as the record: when it returns
// nil, both are durable, and after a crash either both are there or
// neither. If change fails, neither is written and the error wraps
// ErrChangeRefused and change's error; the other records of the batch
// are written all the same. The other errors are Append's. The pair costs
// one commit, shared with whatever else the batch holds, where a
// transaction of the caller's own followed by Append cost two.
//
// change runs on the committer (see Change); a change that fails makes
// the committer roll the batch back and write it again without that
// record, so a failing change is for the store's refusals, not for
// ordinary control flow.
func (l *Log) AppendWith(ctx context.Context, e Entry, change Change) (Record, error) {
	if change == nil {
		return Record{}, errdefs.New(errdefs.ErrInvalidArgument, "audit: append with: no change")
	}
	data, err := l.checkEntry(e)
	if err != nil {
		return Record{}, err
	}
	return l.appendCanonicalWith(ctx, e, data, change)
}

// appendCanonical queues a record whose data is already canonical and
// waits until it is committed.
func (l *Log) appendCanonical(ctx context.Context, e Entry, data []byte) (Record, error) {
	return l.appendCanonicalWith(ctx, e, data, nil)
}

func (l *Log) appendCanonicalWith(ctx context.Context, e Entry, data []byte, change Change) (Record, error) {
	p, err := l.enqueue(ctx, e, data, false, change)
	if err != nil {
		return Record{}, err
	}
	return p.wait(ctx, e.Kind)
}

// wait waits until p is committed or has failed.
func (p *pending) wait(ctx context.Context, kind string) (Record, error) {
	select {
	case <-p.done:
		if p.err != nil {
			return Record{}, p.err
		}
		return p.rec, nil
	case <-ctx.Done():
		return Record{}, fmt.Errorf("audit: append %s: %w (the record may still be committed)", kind, ctx.Err())
	}
}

// AppendWithIntent is AppendWith followed at once by the intent record of
// next (Begin): the record, then the intent, in the same transaction,
// both durable with one commit or neither. It is for an action that
// follows a change with nothing in between (a sandbox's create and its
// first command), where two appends in turn cost two commits. When change
// is refused, the intent fails with ErrChangeRefused too: an intent never
// names what was not made. On success the Intent must be ended like
// Begin's. The errors are AppendWith's and Begin's.
func (l *Log) AppendWithIntent(ctx context.Context, e Entry, change Change, next Entry) (Record, *Intent, error) {
	if change == nil {
		return Record{}, nil, errdefs.New(errdefs.ErrInvalidArgument, "audit: append with intent: no change")
	}
	data, err := l.checkEntry(e)
	if err != nil {
		return Record{}, nil, err
	}
	ie := next
	ie.Kind = next.Kind + IntentSuffix
	idata, err := l.checkEntry(ie)
	if err != nil {
		return Record{}, nil, err
	}
	follower := l.newPending(ie, idata, false, nil)
	p := l.newPending(e, data, false, change)
	p.followers = []*pending{follower}
	if err := l.send(ctx, p); err != nil {
		return Record{}, nil, err
	}
	rec, err := p.wait(ctx, e.Kind)
	if err != nil {
		return Record{}, nil, err
	}
	// Committed in the same transaction as rec: done already.
	if _, err := follower.wait(ctx, ie.Kind); err != nil {
		return Record{}, nil, err
	}
	next.Data = nil
	return rec, &Intent{log: l, seq: follower.rec.Seq, base: next}, nil
}

// enqueue hands a record whose data is already canonical to the committer;
// p.done closes once it is committed or has failed.
func (l *Log) enqueue(ctx context.Context, e Entry, data []byte, lazy bool, change Change) (*pending, error) {
	p := l.newPending(e, data, lazy, change)
	if err := l.send(ctx, p); err != nil {
		return nil, err
	}
	return p, nil
}

func (l *Log) newPending(e Entry, data []byte, lazy bool, change Change) *pending {
	p := &pending{
		lazy:   lazy,
		change: change,
		// Session and actor are identifiers, but a caller may build one from
		// a credential by mistake; they are hashed and stored too.
		session: l.redact.RedactString(e.Session),
		actor:   l.redact.RedactString(e.Actor),
		kind:    e.Kind,
		data:    data,
		done:    make(chan struct{}),
	}
	p.args = [4]any{p.session, p.actor, p.kind, string(data)}
	return p
}

// send queues p (and its followers) for the committer.
func (l *Log) send(ctx context.Context, p *pending) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("audit: append %s: %w", p.kind, err)
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return ErrClosed
	}
	select {
	case l.reqs <- p:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("audit: append %s: %w", p.kind, ctx.Err())
	}
}

// Close stops accepting appends, waits until every queued record has been
// committed (or failed) and stops the committer. It does not close the
// store. It is safe to call more than once.
//
// Before the queue closes, the summaries AppendRepeated still holds are
// appended. After the committer has stopped, a "shutdown" checkpoint is
// written; an error writing it is returned.
func (l *Log) Close() error {
	l.repeats.close()
	l.mu.Lock()
	first := !l.closed
	if first {
		l.closed = true
		close(l.reqs)
	}
	l.mu.Unlock()
	<-l.done
	var errs []error
	if first {
		errs = append(errs, l.stopCheckpoints())
	}
	// Only the committer used the statements, and it has exited.
	errs = append(errs, l.closeStmts())
	return errors.Join(errs...)
}

// insertChunks returns the row counts of the multi-row INSERT statements a
// batch is written with, largest first; a batch of n rows uses the largest
// that fit, then smaller ones (63 rows: 3x16, 3x4, 3x1). One statement per
// 64 rows instead of 64 statements saved about a quarter of the committer's
// time per batch: each Exec through database/sql and the driver has a fixed
// cost of a few microseconds. The 256-row statement serves the batches many
// concurrent appenders form. 256 x 9 parameters is far below SQLite's limit
// on bound parameters (32766).
func insertChunks() [5]int { return [...]int{256, 64, 16, 4, 1} }

func (l *Log) prepare(ctx context.Context) error {
	const row = `(?, ?, ?, ?, ?, ?, ?, ?, ?)`
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
		batch = take(batch[:0], p)
		open := l.fill(&batch, &timer)
		if open && allLazy(batch) {
			open = l.awaitCompany(&batch, &timer)
		}
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

// take adds p and its followers to batch: a record and the records
// queued with it always share a transaction. A batch may so exceed
// MaxBatch by the followers of its last record.
func take(batch []*pending, p *pending) []*pending {
	batch = append(batch, p)
	return append(batch, p.followers...)
}

func allLazy(batch []*pending) bool {
	for _, p := range batch {
		if !p.lazy {
			return false
		}
	}
	return true
}

// awaitCompany holds a batch of lazy records for up to lazyDelay, until a
// record somebody waits for arrives (then the queue is drained as fill
// does) or the batch is full. It reports whether the queue is still open.
func (l *Log) awaitCompany(batch *[]*pending, timer **time.Timer) bool {
	wait := time.NewTimer(lazyDelay)
	defer wait.Stop()
	for len(*batch) < l.opts.MaxBatch {
		select {
		case p, ok := <-l.reqs:
			if !ok {
				return false
			}
			*batch = take(*batch, p)
			if !p.lazy {
				return l.fill(batch, timer)
			}
		case <-wait.C:
			return true
		}
	}
	return true
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
			*batch = take(*batch, p)
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
			*batch = take(*batch, p)
		case <-deadline:
			return true
		}
	}
	return true
}

// commit writes batch in one transaction and then wakes its appenders.
//
// A batch chains onto the head this Log committed last, without reading it
// back: seq is the table's INTEGER PRIMARY KEY and the table only grows, so
// if another process appended meanwhile, the batch's first seq is taken and
// its INSERT fails on the key (errHeadMoved). Then the batch is written
// again onto the head read inside the transaction, which on the store's
// writer begins IMMEDIATE and so holds SQLite's write lock: the chain
// cannot fork. Not reading the head saved one statement per batch (about
// 30 of a batch's 400-500 microseconds on the daemon's hot path). It also
// keeps a record that vanished from the end of the table (the triggers
// dropped) from being buried: the next batch still chains onto it, and
// Verify reports the gap.
//
// On any failure the transaction rolls back and every request in the batch
// gets the error. The in-memory head moves only after a commit, and after
// a failed batch the next one reads the head from the database, as after a
// conflict: a COMMIT that failed may still have left frames that a later
// recovery keeps. If COMMIT itself failed, SQLite may have left the
// transaction open on the writer connection (it rolls back on its own for
// some errors, not all), so it is rolled back explicitly: the next batch
// must not find itself inside a transaction that holds rows nobody
// acknowledged.
//
// A change (AppendWith) that fails ends only its own record: the batch is
// rolled back and written again without it. Each round removes one, so a
// batch is written at most once per change it holds, plus once.
func (l *Log) commit(batch []*pending) {
	var err error
	fromDB := l.headStale
	for {
		err = l.writeBatch(batch, fromDB)
		if errors.Is(err, errHeadMoved) && !fromDB {
			fromDB = true
			continue
		}
		var refused *changeRefused
		if !errors.As(err, &refused) {
			break
		}
		p := refused.p
		p.err = fmt.Errorf("%w: %w", ErrChangeRefused, refused.err)
		close(p.done)
		for _, f := range p.followers {
			f.err = fmt.Errorf("%w: the record it follows was refused: %w", ErrChangeRefused, refused.err)
			close(f.done)
		}
		batch = slices.DeleteFunc(batch, func(q *pending) bool { return q == p || slices.Contains(p.followers, q) })
		if len(batch) == 0 {
			return
		}
	}
	l.headStale = err != nil
	if err != nil {
		err = classifyWriteError(err)
		for _, p := range batch {
			p.err = err
			close(p.done)
		}
		return
	}
	last := batch[len(batch)-1].rec
	l.headMu.Lock()
	l.headSeq, l.headHash, l.headMAC = last.Seq, last.Hash, last.MAC
	close(l.changed)
	l.changed = make(chan struct{})
	kick := l.cpKick != nil && last.Seq-l.cpSeq >= int64(l.opts.CheckpointEvery)
	l.headMu.Unlock()
	for _, p := range batch {
		close(p.done)
	}
	if kick {
		select {
		case l.cpKick <- struct{}{}:
		default:
		}
	}
}

// classifyWriteError wraps a failed batch's error in ErrStorageFull or
// ErrNotWritten.
func classifyWriteError(err error) error {
	if errdefs.IsDiskFull(err) {
		return fmt.Errorf("%w: %w", ErrStorageFull, err)
	}
	return fmt.Errorf("%w: %w", ErrNotWritten, err)
}

// changeRefused is writeBatch's error when the change of one of its
// records failed.
type changeRefused struct {
	p   *pending
	err error
}

func (e *changeRefused) Error() string { return "audit: change refused: " + e.err.Error() }

const insertSQL = `INSERT INTO audit_log (seq, time, session, actor, kind, data, prev_hash, hash, mac) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`

// cols is the number of columns insertSQL binds per row.
const cols = 9

// errHeadMoved is writeBatch's error when the batch's first seq is taken:
// another process appended since this Log's last commit.
var errHeadMoved = errors.New("audit: the chain head moved (another process appended)")

// sqliteConstraintPrimaryKey is SQLite's extended result code for a
// PRIMARY KEY conflict.
const sqliteConstraintPrimaryKey = 1555

func isPrimaryKeyConflict(err error) bool {
	var c interface{ Code() int }
	return errors.As(err, &c) && c.Code() == sqliteConstraintPrimaryKey
}

// writeBatch writes batch in one transaction, chained onto the head this
// Log committed last or, with fromDB, onto the head read inside the
// transaction (see commit).
func (l *Log) writeBatch(batch []*pending, fromDB bool) (err error) {
	// The committer's work must not be cut short by one appender's context:
	// the batch holds other appenders' records too.
	ctx := context.Background()
	tx, err := l.write.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit: begin batch: %w", err)
	}
	committing := false
	defer func() {
		switch {
		case err == nil:
		case committing:
			// database/sql considers the transaction over once Commit
			// returned; SQLite may not. "no transaction is active" is the
			// expected answer when SQLite did roll back.
			_, _ = l.write.ExecContext(ctx, "ROLLBACK")
		default:
			tx.Rollback()
		}
	}()
	// The changes first: one that fails sends the batch back to commit,
	// which writes it again without that record.
	for _, p := range batch {
		if p.change == nil {
			continue
		}
		if cerr := p.change(ctx, tx); cerr != nil {
			return &changeRefused{p: p, err: cerr}
		}
	}
	// Only the committer moves the head, so it reads it without headMu.
	seq, prev := l.headSeq, l.headHash
	if fromDB {
		var headMAC string
		seq, prev, headMAC, err = scanHead(tx.StmtContext(ctx, l.headStmt).QueryRowContext(ctx))
		if err != nil {
			return fmt.Errorf("audit: read chain head: %w", err)
		}
		if headMAC != "" && l.mac == nil {
			// Another process keyed the log since New.
			return fmt.Errorf("audit: record %d is keyed but this Log has no key", seq)
		}
	}

	// A head read back (after a conflict) that is not a hash means the
	// table was tampered with; chaining onto it would only bury that, so
	// appends stop until someone looks (Verify names the record).
	prevRaw, err := decodeHash(prev)
	if err != nil {
		return fmt.Errorf("audit: last record %d: %w", seq, err)
	}
	h := &l.hash
	if h.h == nil {
		h.init()
	}
	args := l.args[:0]
	// Each record's hash is the next one's prev_hash: boxed once, used
	// twice.
	var prevArg any = prev
	for _, p := range batch {
		seq++
		t := l.opts.Clock().UTC()
		ts := t.Format(TimeLayout)
		prevRaw = h.sumRaw(&prevRaw, seq, ts, p.session, p.actor, p.kind, p.args[3].(string))
		hex.Encode(l.hexBuf[:], prevRaw[:])
		hs := string(l.hexBuf[:])
		mac := ""
		if l.mac != nil {
			mac = l.mac.sumHex(seq, &prevRaw)
		}
		// Round(0) drops the monotonic clock reading, which the stored
		// string cannot carry, so the returned Record equals what Tail
		// reads back.
		p.rec = Record{
			Seq: seq, Time: t.Round(0), Session: p.session, Actor: p.actor, Kind: p.kind,
			Data: p.data, PrevHash: prev, Hash: hs, MAC: mac,
		}
		var hashArg any = hs
		args = append(args, seq, ts, p.args[0], p.args[1], p.args[2], p.args[3], prevArg, hashArg, mac)
		prev, prevArg = hs, hashArg
	}
	// The committer reuses the slice; its references to this batch's
	// strings are dropped once the batch is written.
	l.args = args
	defer clear(args)
	for i, n := range insertChunks() {
		for len(args) >= cols*n {
			// Bound to the transaction's connection, the writer's only one,
			// so this reuses the statement prepared in New.
			if _, err := tx.StmtContext(ctx, l.inserts[i]).ExecContext(ctx, args[:cols*n]...); err != nil {
				if !fromDB && isPrimaryKeyConflict(err) {
					return fmt.Errorf("%w: %w", errHeadMoved, err)
				}
				return fmt.Errorf("audit: insert records %d to %d: %w", batch[0].rec.Seq, seq, err)
			}
			args = args[cols*n:]
		}
	}
	committing = true
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
// (or found at New); 0 and GenesisHash for an empty log. Checkpoints (see
// Options.CheckpointFile) publish it outside the data directory.
func (l *Log) Head() (int64, string) {
	l.headMu.Lock()
	defer l.headMu.Unlock()
	return l.headSeq, l.headHash
}

// KeyID is the ID of the Log's key, "" when it has none.
func (l *Log) KeyID() string {
	if l.opts.Key == nil {
		return ""
	}
	return l.opts.Key.ID()
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
			n, _, _, err := readHead(ctx, l.read)
			if err != nil {
				return fmt.Errorf("audit: wait: %w", err)
			}
			if n > afterSeq {
				return nil
			}
		}
	}
}
