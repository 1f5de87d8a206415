package files

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"time"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/inside/beneath"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"golang.org/x/sys/unix"
)

// The operations of the daemon's file API, by sandbox path (clean,
// absolute, beneath /workspace or /tmp).

// Upload replaces the file at p with the upload framed in src (see
// wire.NewFramer), atomically, with permission bits mode. It returns the
// bytes written.
func Upload(p string, src io.Reader, mode uint32) (int64, error) {
	base, rel, err := beneath.Split(p)
	if err != nil {
		return 0, err
	}
	return Write(base, rel, wire.NewUnframer(src), mode&0o777)
}

// Open opens the regular file at p for reading.
func Open(p string) (*os.File, os.FileInfo, error) {
	base, rel, err := beneath.Split(p)
	if err != nil {
		return nil, nil, err
	}
	return OpenRegular(base, rel)
}

// Listing is an open directory and its entries' names, sorted.
type Listing struct {
	Names []string
	d     *os.File
}

// List opens the directory at p and reads its names.
func List(p string) (*Listing, error) {
	base, rel, err := beneath.Split(p)
	if err != nil {
		return nil, err
	}
	d, err := beneath.Open(base, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0, false)
	if err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		d.Close()
		return nil, err
	}
	sort.Strings(names)
	return &Listing{Names: names, d: d}, nil
}

// Encode writes one JSON sandbox.FileInfo a line to w, for every entry
// still there, in name order. It stops at the first write that fails (the
// daemon stopped reading).
func (l *Listing) Encode(w io.Writer) error {
	enc := json.NewEncoder(w)
	for _, n := range l.Names {
		var st unix.Stat_t
		if err := unix.Fstatat(int(l.d.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		fi := sandbox.FileInfo{Name: n, Size: st.Size, Mode: fs.FileMode(st.Mode & 0o7777),
			ModTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			fi.Type = "file"
		case unix.S_IFDIR:
			fi.Type, fi.Mode = "dir", fi.Mode|fs.ModeDir
		case unix.S_IFLNK:
			fi.Type, fi.Mode = "symlink", fi.Mode|fs.ModeSymlink
		default:
			fi.Type = "other"
		}
		if err := enc.Encode(fi); err != nil {
			return err
		}
	}
	return nil
}

// Close closes the directory.
func (l *Listing) Close() error { return l.d.Close() }

// Failure is how an operation on p that failed with err is reported to
// the daemon: a wire code (which the daemon maps with wire.FileErr), the
// errno when there is one, and the text.
func Failure(p string, err error) *wire.FileError {
	var fe *wire.FileError
	if errors.As(err, &fe) {
		return fe
	}
	var en unix.Errno
	errors.As(err, &en)
	code := wire.CodeIO
	switch {
	case errors.Is(err, wire.ErrIncomplete):
		code = wire.CodeAborted
	case errors.Is(err, ErrNotRegular):
		code = wire.CodeBadRequest
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		code = wire.CodeNotFound
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EROFS):
		code = wire.CodeDenied
	case errors.Is(err, unix.EISDIR):
		code = wire.CodeBadRequest
	case en == 0:
		code = wire.CodeBadRequest
	}
	return &wire.FileError{Code: code, Errno: int(en), Err: fmt.Sprintf("%s: %v", p, err)}
}
