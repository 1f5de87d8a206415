// Package keyfile reads and creates the daemon's key files (the audit key,
// the secrets key): one line of hex digits in a regular file only its
// owner may access, kept outside the data directory by the callers'
// defaults. Creating one never replaces an existing file and never leaves
// one half-written.
package keyfile

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrUnsafe marks a key file refused for what it is rather than for an
// I/O failure: a symbolic link, not a regular file, accessible to other
// users, or not holding a key.
var ErrUnsafe = errors.New("unsafe or malformed key file")

// Load reads the key of size bytes from path. what names the key in
// errors ("audit key"). It refuses a symbolic link, anything but a regular
// file (without blocking on a FIFO) and a file users other than its owner
// may read or write (mode & 0o077 != 0), since whoever can read it holds
// the key.
func Load(what, path string, size int) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%s %s: %w: a symbolic link; give the file itself", what, path, ErrUnsafe)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s %s: %w: not a regular file", what, path, ErrUnsafe)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s %s: %w: accessible to other users (mode %04o); chmod 600 it (and consider the key compromised)",
			what, path, ErrUnsafe, st.Mode().Perm())
	}
	// A key file is one short line: what is beyond this holds no key.
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != size {
		return nil, fmt.Errorf("%s %s: %w: does not hold a key (%d hex digits on one line)", what, path, ErrUnsafe, 2*size)
	}
	return raw, nil
}

// Ensure loads the key at path, creating the file with a new random key
// (mode 0600; missing directories 0700) if it does not exist; created
// reports whether it did. Two processes racing to create one file end up
// with the same key: it is written under a temporary name and linked into
// place.
func Ensure(what, path string, size int) (raw []byte, created bool, err error) {
	raw, err = Load(what, path, size)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return raw, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	raw = make([]byte, size)
	if _, err := rand.Read(raw); err != nil {
		return nil, false, err
	}
	tmp, err := os.CreateTemp(dir, ".key-*")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	defer os.Remove(tmp.Name())
	werr := tmp.Chmod(0o600)
	if werr == nil {
		_, werr = tmp.WriteString(hex.EncodeToString(raw) + "\n")
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, false, fmt.Errorf("%s: %w", what, werr)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			raw, err := Load(what, path, size)
			return raw, false, err
		}
		return nil, false, fmt.Errorf("%s: %w", what, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return raw, true, nil
}
