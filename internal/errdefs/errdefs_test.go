package errdefs

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

type sqliteErr int

func (e sqliteErr) Error() string { return fmt.Sprintf("sqlite error %d", int(e)) }
func (e sqliteErr) Code() int     { return int(e) }

func TestClass(t *testing.T) {
	errGone := New(ErrNotFound, "sandbox not found")
	for _, c := range []struct {
		err  error
		want error
	}{
		{errGone, ErrNotFound},
		{fmt.Errorf("exec in sb-1: %w", errGone), ErrNotFound},
		{fmt.Errorf("%w: %w", New(ErrInvalidArgument, "bad spec"), New(ErrForbidden, "not allowed")), ErrInvalidArgument},
		{&fs.PathError{Op: "write", Path: "/data/x", Err: syscall.ENOSPC}, ErrInsufficientStorage},
		{fmt.Errorf("commit: %w", sqliteErr(13)), ErrInsufficientStorage},
		{sqliteErr(13 | 3<<8), ErrInsufficientStorage}, // an extended SQLITE_FULL code
		{sqliteErr(5), nil}, // SQLITE_BUSY is nothing of the kind
		{errors.New("boom"), nil},
		{nil, nil},
	} {
		if got := Class(c.err); got != c.want {
			t.Errorf("Class(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", errGone), errGone) || errGone.Error() != "sandbox not found" {
		t.Fatal("a classed sentinel must stay matchable and keep its own message")
	}
}
