package audit

import (
	"bufio"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// DefaultTailLimit is the page size Tail uses when asked for limit <= 0.
const DefaultTailLimit = 1000

const selectColumns = `SELECT seq, time, session, actor, kind, data, prev_hash, hash, mac FROM audit_log`

// Tail returns up to limit records with seq > afterSeq, oldest first
// (limit <= 0 means DefaultTailLimit). Page through the log by passing the
// last returned seq as the next afterSeq.
func (l *Log) Tail(ctx context.Context, afterSeq int64, limit int) ([]Record, error) {
	if limit <= 0 {
		limit = DefaultTailLimit
	}
	rows, err := l.read.QueryContext(ctx, selectColumns+` WHERE seq > ? ORDER BY seq LIMIT ?`, afterSeq, limit)
	var out []Record
	if err == nil {
		out, err = scanRecords(rows)
	}
	if err != nil {
		return nil, fmt.Errorf("audit: tail after %d: %w", afterSeq, err)
	}
	return out, nil
}

// Follow calls fn for every record with seq > afterSeq in order, then keeps
// waiting for new ones and calls fn for them too, until ctx ends (it then
// returns ctx's error), fn returns an error (returned as is) or the Log is
// closed (ErrClosed). It is what `audit tail -f` needs.
func (l *Log) Follow(ctx context.Context, afterSeq int64, fn func(Record) error) error {
	for {
		recs, err := l.Tail(ctx, afterSeq, DefaultTailLimit)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if err := fn(r); err != nil {
				return err
			}
			afterSeq = r.Seq
		}
		if len(recs) == DefaultTailLimit {
			continue // more may be waiting; read before sleeping
		}
		if err := l.Wait(ctx, afterSeq); err != nil {
			return err
		}
	}
}

// Export writes every record with seq > afterSeq to w as JSON lines, oldest
// first, one Record (in its MarshalJSON form, MAC included) per line. Data
// is written byte for byte as stored, so each line carries exactly what was
// hashed, and VerifyExport with the key and the checkpoint file checks an
// export offline as Verify checks the database. It
// streams from one read transaction, so the export is a consistent snapshot
// even while appends continue.
func (l *Log) Export(ctx context.Context, w io.Writer, afterSeq int64) error {
	rows, err := l.read.QueryContext(ctx, selectColumns+` WHERE seq > ? ORDER BY seq`, afterSeq)
	if err != nil {
		return fmt.Errorf("audit: export: %w", err)
	}
	defer rows.Close()
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	// Without this, '<', '>' and '&' in data would be written as \u003c and
	// so on: the same JSON value, but no longer the hashed bytes.
	enc.SetEscapeHTML(false)
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return fmt.Errorf("audit: export: %w", err)
		}
		if err := enc.Encode(r); err != nil {
			return fmt.Errorf("audit: export record %d: %w", r.Seq, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("audit: export: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("audit: export: %w", err)
	}
	return nil
}

// scanRecords reads the records rows (of selectColumns) holds and closes
// it.
func scanRecords(rows *sql.Rows) ([]Record, error) {
	defer rows.Close()
	var out []Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func scanRecord(rows *sql.Rows) (Record, error) {
	var (
		r    Record
		ts   string
		data string
	)
	if err := rows.Scan(&r.Seq, &ts, &r.Session, &r.Actor, &r.Kind, &data, &r.PrevHash, &r.Hash, &r.MAC); err != nil {
		return Record{}, err
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return Record{}, fmt.Errorf("record %d: time %q: %w", r.Seq, ts, err)
	}
	r.Time = t.UTC()
	r.Data = json.RawMessage(data)
	return r, nil
}
