package container

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"sync"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// FileOp runs the helper with args (a file mode and its arguments) inside
// the sandbox, with the same identity and confinement as a command, stdin
// (may be nil) as its input and stdout (may be nil) taking its output. A
// failed operation's error comes from wire.ParseFileError where the helper
// reported one.
type FileOp func(ctx context.Context, args []string, stdin io.Reader, stdout io.Writer) error

// LimitedBuffer keeps the first Max bytes written to it; every write
// succeeds.
type LimitedBuffer struct {
	Max int
	buf bytes.Buffer
}

func (l *LimitedBuffer) Write(p []byte) (int, error) {
	if room := l.Max - l.buf.Len(); room > 0 {
		l.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// Bytes is what was kept.
func (l *LimitedBuffer) Bytes() []byte { return l.buf.Bytes() }

// String is what was kept.
func (l *LimitedBuffer) String() string { return l.buf.String() }

// WriteFile is sandbox.Sandbox's WriteFile through op. The upload travels
// framed (package fileio): the helper replaces the file only once all of
// it has arrived, so when src fails the file is left as it was, and the
// error is src's.
func WriteFile(ctx context.Context, op FileOp, p string, src io.Reader, mode fs.FileMode) error {
	if err := sandbox.CheckFilePath(p); err != nil {
		return err
	}
	if src == nil {
		src = bytes.NewReader(nil)
	}
	in := &srcErr{r: src}
	err := op(ctx, []string{wire.ModeWrite, p, strconv.FormatUint(uint64(mode.Perm()), 8)}, wire.NewFramer(in), nil)
	if rerr := in.get(); err != nil && rerr != nil && ctx.Err() == nil {
		return fmt.Errorf("writing %s: %w (the file was left as it was)", p, rerr)
	}
	return err
}

// srcErr remembers the first error reading r returned (io.EOF aside). The
// copy into the helper's stdin may still be running when the operation
// returns, hence the lock.
type srcErr struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (s *srcErr) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && err != io.EOF {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
	return n, err
}

func (s *srcErr) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// ReadFile is sandbox.Sandbox's ReadFile through op.
func ReadFile(ctx context.Context, op FileOp, p string, dst io.Writer) error {
	if err := sandbox.CheckFilePath(p); err != nil {
		return err
	}
	if dst == nil {
		dst = io.Discard
	}
	return op(ctx, []string{wire.ModeRead, p}, nil, dst)
}

// ListDir is sandbox.Sandbox's ListDir through op.
func ListDir(ctx context.Context, op FileOp, p string) ([]sandbox.FileInfo, error) {
	if err := sandbox.CheckListPath(p); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := op(ctx, []string{wire.ModeList, p}, nil, &out); err != nil {
		return nil, err
	}
	var list []sandbox.FileInfo
	dec := json.NewDecoder(&out)
	for {
		var fi sandbox.FileInfo
		if err := dec.Decode(&fi); err == io.EOF {
			break
		} else if err != nil {
			return nil, fmt.Errorf("listing %s: %w", p, err)
		}
		list = append(list, fi)
	}
	return list, nil
}
