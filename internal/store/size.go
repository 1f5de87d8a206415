package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"golang.org/x/sys/unix"
)

// DefaultSizeWarn is the database size past which WatchSize warns when
// given no threshold: 1 GiB. The audit log is the only table that grows
// without end (a record is at most about 17 KiB, typically a few hundred
// bytes), so at a few hundred bytes per exec this is millions of commands.
const DefaultSizeWarn = defaults.StoreSizeWarn

// Size returns the bytes the database occupies: the main file plus its
// -wal and -shm files (the WAL holds recent commits until a checkpoint
// folds them in, and can be as large as the main file's growth since).
func (s *Store) Size() (int64, error) {
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		st, err := os.Stat(s.path + suffix)
		if suffix != "" && errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("store: size: %w", err)
		}
		total += st.Size()
	}
	return total, nil
}

// FreeBytes returns the bytes available to the daemon on the file system
// holding the database: what is left before writes fail with
// insufficient_storage.
func (s *Store) FreeBytes() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(s.path, &st); err != nil {
		return 0, fmt.Errorf("store: statfs: %w", err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// SizeWatch configures WatchSize. The zero value warns past
// DefaultSizeWarn, checking every minute, and discards the warnings.
type SizeWatch struct {
	// Threshold is the size in bytes past which to warn (0:
	// DefaultSizeWarn; negative: never warn).
	Threshold int64
	// Every is how often to look (default 1m).
	Every time.Duration
	// Logf receives the warnings.
	Logf func(format string, args ...any)
}

// WatchSize checks the database's size until ctx ends: it warns when the
// size reaches the threshold, again each time it grows by another
// threshold's worth (at 2x, 3x, ...), and says so when it falls back below
// the threshold. The warning names the free space left on the file system.
func (s *Store) WatchSize(ctx context.Context, w SizeWatch) {
	if w.Threshold == 0 {
		w.Threshold = DefaultSizeWarn
	}
	if w.Threshold < 0 {
		return
	}
	if w.Every <= 0 {
		w.Every = time.Minute
	}
	if w.Logf == nil {
		return
	}
	t := time.NewTicker(w.Every)
	defer t.Stop()
	var next int64 = w.Threshold // warn when size >= next
	for {
		if n, err := s.Size(); err == nil {
			next = s.checkSize(n, next, w)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// checkSize warns if n has reached next and returns the next size to warn
// at.
func (s *Store) checkSize(n, next int64, w SizeWatch) int64 {
	switch {
	case n >= next:
		free, _ := s.FreeBytes()
		w.Logf("store: WARNING: the database %s is %s (warning threshold %s; %s free on its file system); export and archive the audit log, or raise --store-size-warn",
			s.path, human(n), human(w.Threshold), human(free))
		return (n/w.Threshold + 1) * w.Threshold
	case next > w.Threshold && n < w.Threshold:
		w.Logf("store: the database %s is back below %s (%s)", s.path, human(w.Threshold), human(n))
		return w.Threshold
	}
	return next
}

func human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
