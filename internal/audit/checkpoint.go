package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// Checkpoint is the head of the chain as published outside the data
// directory: the newest record's seq, hash and MAC at some moment. Verify
// compares the log with every checkpoint it can read, so a log that ends
// before a checkpoint's seq (its tail was cut) or that holds another record
// at that seq (it was rewritten) is caught, even by someone who recomputed
// the chain.
//
// One checkpoint is one JSON line of the checkpoint file:
//
//	{"seq":1000,"hash":"…","mac":"…","key_id":"…","time":"…","reason":"records","db":"/…/ironclaw.db"}
type Checkpoint struct {
	Seq  int64  `json:"seq"`
	Hash string `json:"hash"`
	// MAC is the record's MAC ("" for an empty log or a legacy head).
	MAC string `json:"mac,omitempty"`
	// KeyID names the key the log was keyed with ("" when unkeyed).
	KeyID string `json:"key_id,omitempty"`
	// Time is when the checkpoint was written (TimeLayout).
	Time string `json:"time"`
	// Reason is why: "start" (a Log opened), "records" (CheckpointEvery
	// records since the last one), "interval" (CheckpointInterval passed
	// with new records), "shutdown" (Close).
	Reason string `json:"reason"`
	// DB is the database file the checkpoint is of, for a human reader;
	// Verify does not use it.
	DB string `json:"db,omitempty"`
}

// Defaults for the checkpoint options.
const (
	DefaultCheckpointEvery    = 256
	DefaultCheckpointInterval = 30 * time.Second
	// maxCheckpointLine bounds one line of a checkpoint file; a real one
	// is about 300 bytes.
	maxCheckpointLine = 4096
)

// DefaultCheckpointFile is where the daemon with data directory dataDir
// writes its checkpoints unless told otherwise:
// /var/log/ironclaw/audit-checkpoints/NAME.jsonl when running as root, else
// $XDG_STATE_HOME/ironclaw/audit-checkpoints/NAME.jsonl
// (~/.local/state/...). NAME is the data directory's base name and a hash
// of its absolute path, so daemons with different data directories never
// share a file (a checkpoint file belongs to one chain).
func DefaultCheckpointFile(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	sum := sha256.Sum256([]byte(abs))
	name := filepath.Base(abs) + "-" + hex.EncodeToString(sum[:6]) + ".jsonl"
	return filepath.Join(stateDir(), "audit-checkpoints", name)
}

func stateDir() string {
	if os.Geteuid() == 0 {
		return "/var/log/ironclaw"
	}
	return defaults.UserDir("XDG_STATE_HOME", ".local/state")
}

// checkpointFile appends checkpoints to one file, fsyncing each. It keeps
// the file open and, before every write, checks that the path still names
// the same file: a deleted or replaced checkpoint file is reported, never
// silently recreated (a fresh file would hide that older checkpoints were
// removed).
type checkpointFile struct {
	path string
	f    *os.File
	ino  uint64
	dev  uint64
}

// openCheckpointFile opens path for appending, creating it (0600; missing
// directories 0700) if needed. New decides beforehand whether a missing
// file may be created.
func openCheckpointFile(path string) (*checkpointFile, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit checkpoints: %w", err)
	}
	f, st, err := openRegular("audit checkpoints", path, os.O_WRONLY|os.O_APPEND|os.O_CREATE)
	if err != nil {
		return nil, err
	}
	sys, _ := st.Sys().(*syscall.Stat_t)
	cf := &checkpointFile{path: path, f: f}
	if sys != nil {
		cf.ino, cf.dev = sys.Ino, uint64(sys.Dev)
	}
	return cf, nil
}

// openRegular opens path (what names it in errors), refusing anything but
// a regular file without blocking on it (a FIFO put in its place would
// otherwise hang the open). A file it creates is 0600.
func openRegular(what, path string, flags int) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, flags|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", what, err)
	}
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s %s: not a regular file", what, path)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// ErrCheckpointFileGone is returned when the checkpoint file was deleted
// or replaced while the Log was writing it.
var ErrCheckpointFileGone = errors.New("audit checkpoints: the checkpoint file was deleted or replaced")

func (cf *checkpointFile) write(c Checkpoint) error {
	st, err := os.Stat(cf.path)
	if err != nil {
		return fmt.Errorf("%w (%s: %v)", ErrCheckpointFileGone, cf.path, err)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && (sys.Ino != cf.ino || uint64(sys.Dev) != cf.dev) {
		return fmt.Errorf("%w (%s)", ErrCheckpointFileGone, cf.path)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := cf.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("audit checkpoints: write %s: %w", cf.path, err)
	}
	if err := cf.f.Sync(); err != nil {
		return fmt.Errorf("audit checkpoints: fsync %s: %w", cf.path, err)
	}
	return nil
}

func (cf *checkpointFile) close() error { return cf.f.Close() }

// checkpointSet is what a checkpoint file says, as Verify uses it.
type checkpointSet struct {
	file    string
	missing bool // the file does not exist
	// bySeq holds the checkpoints compared with the log, by seq: all of
	// them up to maxCheckpointsKept, beyond that an evenly thinned subset
	// (the newest always included). The newest alone proves the whole
	// prefix (its hash covers every record before it); the others only say
	// more precisely where a rewrite happened.
	bySeq  map[int64]Checkpoint
	kept   []int64 // the seqs in bySeq, in file order
	stride int     // keep every stride-th new checkpoint
	seen   int     // distinct checkpoints offered to keep
	// conflict is a seq two checkpoints disagree about (0: none).
	conflict int64
	read     int64 // checkpoints (lines) read
	newest   Checkpoint
	keyIDs   map[string]bool
	// bad is a line that could not be parsed (0: none); a torn last line
	// without its newline (a crash while writing) is skipped instead.
	bad int
}

// maxCheckpointsKept bounds the checkpoints Verify holds in memory (about
// 200 bytes each). At one per 256 records or 30 s of activity, a file
// reaches it after about 16 million records or three weeks of constant
// appending; older ones are thinned, not ignored.
const maxCheckpointsKept = 1 << 16

func (cs *checkpointSet) add(c Checkpoint) {
	cs.read++
	if len(cs.keyIDs) < 16 {
		cs.keyIDs[c.KeyID] = true
	}
	if c.Seq >= cs.newest.Seq {
		cs.newest = c
	}
	if old, ok := cs.bySeq[c.Seq]; ok {
		if (old.Hash != c.Hash || old.MAC != c.MAC) && cs.conflict == 0 {
			cs.conflict = c.Seq
		}
		return
	}
	cs.seen++
	if (cs.seen-1)%cs.stride != 0 {
		return
	}
	cs.bySeq[c.Seq] = c
	cs.kept = append(cs.kept, c.Seq)
	if len(cs.kept) > maxCheckpointsKept {
		cs.stride *= 2
		j := 0
		for i, seq := range cs.kept {
			if i%2 == 0 {
				cs.kept[j] = seq
				j++
			} else {
				delete(cs.bySeq, seq)
			}
		}
		cs.kept = cs.kept[:j]
	}
}

// readCheckpoints reads a checkpoint file. A missing file is reported in
// the set, not as an error; an error means the file exists but could not
// be read.
func readCheckpoints(ctx context.Context, path string) (*checkpointSet, error) {
	cs, f, _, err := openCheckpoints(path)
	if f == nil {
		return cs, err
	}
	defer f.Close()
	err = scanCheckpoints(ctx, f, cs)
	if cs.read > 0 {
		cs.bySeq[cs.newest.Seq] = cs.newest // kept whatever the thinning did
	}
	return cs, err
}

// openCheckpoints opens the checkpoint file at path for a new, empty set.
// A missing file gives the set, marked missing, and no file; an error
// (the file exists but cannot be opened) gives neither.
func openCheckpoints(path string) (*checkpointSet, *os.File, os.FileInfo, error) {
	cs := &checkpointSet{file: path, bySeq: map[int64]Checkpoint{}, keyIDs: map[string]bool{}, stride: 1}
	f, st, err := openRegular("audit checkpoints", path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		cs.missing = true
		return cs, nil, nil, nil
	}
	if err != nil {
		return nil, nil, nil, err
	}
	return cs, f, st, nil
}

// scanCheckpoints adds the checkpoints read from r to cs.
func scanCheckpoints(ctx context.Context, r io.Reader, cs *checkpointSet) error {
	br := bufio.NewReaderSize(r, 64<<10)
	line := 0
	for {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			cs.bad = line + 1
			return nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("audit: read checkpoints: %w", err)
		}
		if len(b) == 0 && errors.Is(err, io.EOF) {
			return nil
		}
		line++
		if line%4096 == 0 {
			if cerr := ctx.Err(); cerr != nil {
				return cerr
			}
		}
		torn := !bytes.HasSuffix(b, []byte("\n"))
		b = bytes.TrimSpace(b)
		if len(b) == 0 {
			continue
		}
		var c Checkpoint
		if len(b) > maxCheckpointLine || json.Unmarshal(b, &c) != nil || c.Seq < 0 || len(c.Hash) != 2*sha256.Size {
			if !torn {
				cs.bad = line
			}
			return nil // a torn last line is a write cut short by a crash
		}
		cs.add(c)
		if errors.Is(err, io.EOF) {
			return nil
		}
	}
}

// readRecentCheckpoints reads only the end of a checkpoint file (its last
// 64 KiB, some 200 checkpoints): enough for New to compare the log with
// what was checkpointed last, however long the file has grown.
func readRecentCheckpoints(ctx context.Context, path string) (*checkpointSet, error) {
	cs, f, st, err := openCheckpoints(path)
	if f == nil {
		return cs, err
	}
	defer f.Close()
	const tail = 64 << 10
	var r io.Reader = f
	if st.Size() > tail {
		br := bufio.NewReader(io.NewSectionReader(f, st.Size()-tail, tail))
		if _, err := br.ReadSlice('\n'); err != nil { // a partial first line
			return cs, nil
		}
		r = br
	}
	return cs, scanCheckpoints(ctx, r, cs)
}

// webhookSink POSTs checkpoints to a URL. Only the newest checkpoint
// matters to a receiver (it covers every earlier one), so a slow or failing
// receiver holds at most one pending checkpoint, never a queue.
type webhookSink struct {
	url    string
	client *http.Client
	logf   func(string, ...any)
	next   chan Checkpoint // capacity 1: the newest pending checkpoint
	done   chan struct{}
}

func newWebhookSink(url string, client *http.Client, logf func(string, ...any)) *webhookSink {
	if client == nil {
		client = &http.Client{
			Timeout: 10 * time.Second,
			// A redirect could send the checkpoint where the operator did
			// not point it.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	w := &webhookSink{url: url, client: client, logf: logf, next: make(chan Checkpoint, 1), done: make(chan struct{})}
	go w.run()
	return w
}

// offer replaces any pending checkpoint with c.
func (w *webhookSink) offer(c Checkpoint) {
	for {
		select {
		case w.next <- c:
			return
		default:
		}
		select {
		case <-w.next:
		default:
		}
	}
}

func (w *webhookSink) run() {
	defer close(w.done)
	for c := range w.next {
		if err := w.post(c); err != nil {
			w.logf("audit: checkpoint webhook: %v", err)
		}
	}
}

func (w *webhookSink) post(c Checkpoint) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodPost, w.url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST checkpoint %d: status %s", c.Seq, resp.Status)
	}
	return nil
}

// close sends the pending checkpoint (waiting up to the client's timeout)
// and stops.
func (w *webhookSink) close() {
	close(w.next)
	<-w.done
}

// openCheckpoints sets up the checkpoint sinks and writes the "start"
// checkpoint (see New). keyed says the log already holds keyed records.
// A missing checkpoint file is created only for an empty log.
func (l *Log) openCheckpoints(ctx context.Context, keyed bool) (err error) {
	if l.opts.CheckpointFile == "" && l.opts.CheckpointURL == "" {
		return nil
	}
	defer func() {
		if err != nil {
			l.closeCheckpoints()
		}
	}()
	if path := l.opts.CheckpointFile; path != "" {
		cs, err := readRecentCheckpoints(ctx, path)
		if err != nil {
			return err
		}
		if cs.missing && (keyed || l.headSeq > 0) {
			// A log with records and no checkpoint file: the file was
			// deleted or moved, or this is the first start with
			// checkpoints on an old log. Only the operator can tell; a
			// fresh file here would hide a deletion (an attacker who
			// stripped every MAC and deleted the file would get a clean
			// "legacy" log).
			return errdefs.New(errdefs.ErrConflict, fmt.Sprintf(
				"audit: the checkpoint file %s is missing, but the log holds %d records (keyed: %v): it was deleted or moved. "+
					"Restore it or name it; to start a new checkpoint file knowingly (the log's current end becomes the first checkpoint), create it empty",
				path, l.headSeq, keyed))
		}
		if msg := l.compareNewest(ctx, cs); msg != "" {
			l.opts.Logf("audit: WARNING: %s; `ironclaw audit verify` reports it", msg)
		}
		if l.cpFile, err = openCheckpointFile(path); err != nil {
			return err
		}
	}
	if l.opts.CheckpointURL != "" {
		l.webhook = newWebhookSink(l.opts.CheckpointURL, l.opts.CheckpointClient, l.opts.Logf)
	}
	if err := l.checkpoint("start"); err != nil {
		return err
	}
	l.cpKick = make(chan struct{}, 1)
	l.cpStop = make(chan struct{})
	l.cpDone = make(chan struct{})
	return nil
}

// compareNewest checks the log against the newest checkpoint at start and
// says what is wrong, if anything.
func (l *Log) compareNewest(ctx context.Context, cs *checkpointSet) string {
	if cs.missing || cs.read == 0 {
		return ""
	}
	c := cs.newest
	if c.Seq > l.headSeq {
		return fmt.Sprintf("the audit log ends at record %d, but the checkpoint written %s names record %d: records were cut off (or the database was restored from an older copy)", l.headSeq, c.Time, c.Seq)
	}
	if c.Seq == 0 {
		return ""
	}
	var h, mac string
	err := l.read.QueryRowContext(ctx, `SELECT hash, mac FROM audit_log WHERE seq = ?`, c.Seq).Scan(&h, &mac)
	if err != nil || h != c.Hash || mac != c.MAC {
		return fmt.Sprintf("audit record %d is not the one checkpointed %s: the log was rewritten", c.Seq, c.Time)
	}
	return ""
}

// checkpoint writes the current head to the sinks.
func (l *Log) checkpoint(reason string) error {
	l.cpMu.Lock()
	defer l.cpMu.Unlock()
	l.headMu.Lock()
	c := Checkpoint{Seq: l.headSeq, Hash: l.headHash, MAC: l.headMAC, KeyID: l.KeyID(),
		Time: FormatTime(l.opts.Clock()), Reason: reason, DB: l.dbPath}
	l.headMu.Unlock()
	if l.webhook != nil {
		l.webhook.offer(c)
	}
	if l.cpFile != nil {
		if err := l.cpFile.write(c); err != nil {
			return err
		}
	}
	l.headMu.Lock()
	l.cpSeq = max(l.cpSeq, c.Seq)
	l.headMu.Unlock()
	return nil
}

// minCheckpointSpacing is the least time between two "records"
// checkpoints. Each is an fsync on the checkpoint file, which under heavy
// load (tens of thousands of appends per second) would otherwise compete
// with the log's own commits for the disk; at most ten a second keeps the
// window of uncheckpointed records to a tenth of a second of appends.
const minCheckpointSpacing = 100 * time.Millisecond

// checkpointLoop writes "records" and "interval" checkpoints until
// stopCheckpoints.
func (l *Log) checkpointLoop() {
	defer close(l.cpDone)
	t := time.NewTicker(l.opts.CheckpointInterval)
	defer t.Stop()
	var last time.Time
	var deferred <-chan time.Time // a "records" checkpoint held back by the spacing
	for {
		reason := "records"
		select {
		case <-l.cpStop:
			return
		case <-l.cpKick:
			if wait := minCheckpointSpacing - time.Since(last); wait > 0 {
				if deferred == nil {
					deferred = time.After(wait)
				}
				continue
			}
		case <-deferred:
			deferred = nil
		case <-t.C:
			reason = "interval"
		}
		l.headMu.Lock()
		moved := l.headSeq != l.cpSeq
		l.headMu.Unlock()
		if !moved {
			continue
		}
		if err := l.checkpoint(reason); err != nil {
			l.opts.Logf("audit: WARNING: checkpoint not written: %v", err)
		}
		last = time.Now()
	}
}

// stopCheckpoints ends checkpointLoop, writes the "shutdown" checkpoint
// and closes the sinks.
func (l *Log) stopCheckpoints() error {
	if l.cpKick == nil {
		return nil
	}
	close(l.cpStop)
	<-l.cpDone
	err := l.checkpoint("shutdown")
	l.closeCheckpoints()
	if err != nil {
		return fmt.Errorf("audit: shutdown checkpoint: %w", err)
	}
	return nil
}

func (l *Log) closeCheckpoints() {
	if l.webhook != nil {
		l.webhook.close()
		l.webhook = nil
	}
	if l.cpFile != nil {
		l.cpFile.close()
		l.cpFile = nil
	}
}
