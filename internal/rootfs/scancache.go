package rootfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// The scan of a host root's alternatives, kept in a file between
// processes. A one-shot `ironclaw run` is a new process each time, so the
// in-memory cache (alternatives.go) never helps it: every run read the
// thousand names of /usr/bin and their links again, about 1.2 ms of CPU
// (2 ms of its 11 ms wall time on this project's guest, measured in
// docs/performance.md). The file holds the scan with the stamps of the
// directories it read; a later process takes it when the same stamps are
// read again now, which is exactly the test the in-memory cache applies,
// so a kept scan is never staler than a cached one in a daemon.
//
// The file is a cache, never a source of trust. It is read only when it
// is a regular file owned by the reading user and writable by no one else,
// at most maxScanFileBytes long, complete (it ends with an end marker) and
// of this format; every link in it must pass Alternative, the check a
// plan's links pass anyway, and the names must be sorted and distinct, as
// a scan makes them. Whoever can still write it (the user themself, or
// root) can at most drop links or add ones to targets the view exposes
// already; a file that fails any check is ignored and replaced by a new
// scan. It is written to a temporary name and renamed into place, so a
// reader never sees half of one, and only from a scan that was complete
// and not racy.

// scanFileMagic starts the file and names its format; a file of another
// version is ignored (and replaced).
const scanFileMagic = "ironclaw-alternatives-scan-v1"

// maxScanFileBytes bounds the file: MaxAlternatives links of a name and a
// target each at most 255 bytes, the stamps and the header.
const maxScanFileBytes = MaxAlternatives*(2*256) + 16<<10

// WarmHostViewCached is WarmHostView that takes the scan from file when
// the directories it read are unchanged, and otherwise scans and writes
// the new scan there for the next process. The file is read inside the
// one-scan-at-a-time flight, so a plan (or the runtime's own
// WarmHostView) begun meanwhile waits for it instead of scanning beside
// it. Errors of the file are not reported: without it, the scan is only
// done again.
func WarmHostViewCached(hostRoot, file string) {
	loaded := false
	altFlight.Do(hostRoot, func() (any, error) {
		if entries, ok := cachedAlternatives(hostRoot); ok {
			return entries, nil
		}
		if s := loadScan(file, hostRoot); s != nil {
			altCache.Lock()
			if altCache.m == nil {
				altCache.m = map[string]*altScan{}
			}
			altCache.m[hostRoot] = s
			altCache.Unlock()
			loaded = true
			return s.entries, nil
		}
		return scanAndCache(hostRoot), nil
	})
	if loaded {
		return
	}
	altCache.Lock()
	s := altCache.m[hostRoot]
	altCache.Unlock()
	if s != nil { // complete and not racy, or it would not be cached
		_ = saveScan(file, hostRoot, s)
	}
}

// loadScan returns the scan kept in file for hostRoot if the file passes
// every check above and the stamps it holds are those of now; else nil.
func loadScan(file, hostRoot string) *altScan {
	b, err := readOwnFile(file, maxScanFileBytes)
	if err != nil {
		return nil
	}
	s, err := decodeScan(b, hostRoot)
	if err != nil {
		return nil
	}
	for i, p := range s.paths {
		if takeStamp(p) != s.stamps[i] {
			return nil
		}
	}
	if racy(s.stamps, time.Now()) {
		return nil
	}
	return s
}

// readOwnFile reads a regular file owned by the effective user and not
// writable by group or others, of at most limit bytes, without following
// a final symlink or blocking on a FIFO put in its place.
func readOwnFile(name string, limit int64) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, errors.New("not a regular file")
	case int(st.Uid) != os.Geteuid():
		return nil, errors.New("owned by another user")
	case st.Mode&0o022 != 0:
		return nil, errors.New("writable by others")
	case st.Size > limit:
		return nil, errors.New("too large")
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errors.New("too large")
	}
	return b, nil
}

// saveScan writes s for hostRoot to file, through a temporary file in the
// same directory (made 0700 if missing) renamed into place.
func saveScan(file, hostRoot string, s *altScan) error {
	dir := filepath.Dir(file)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".*") // mode 0600
	if err != nil {
		return err
	}
	_, werr := tmp.Write(encodeScan(hostRoot, s))
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), file)
	}
	if werr != nil {
		os.Remove(tmp.Name())
	}
	return werr
}

// The format: fields each ended by a NUL byte (no name, path or target
// can hold one), in this order: the magic, the host root, the number of
// stamps, each stamp as path, ok, mode, dev, ino, mtime seconds and
// nanoseconds, ctime seconds and nanoseconds; the number of links, each
// link as name and target; then "end".

func encodeScan(hostRoot string, s *altScan) []byte {
	var b []byte
	field := func(v string) { b = append(append(b, v...), 0) }
	num := func(v int64) { b = append(strconv.AppendInt(b, v, 10), 0) }
	unum := func(v uint64) { b = append(strconv.AppendUint(b, v, 10), 0) }
	field(scanFileMagic)
	field(hostRoot)
	num(int64(len(s.paths)))
	for i, p := range s.paths {
		st := s.stamps[i]
		field(p)
		ok := int64(0)
		if st.ok {
			ok = 1
		}
		num(ok)
		num(int64(st.mode))
		unum(st.dev)
		unum(st.ino)
		num(st.mtime.Sec)
		num(st.mtime.Nsec)
		num(st.ctime.Sec)
		num(st.ctime.Nsec)
	}
	links := s.entries
	if len(links) > 0 {
		links = links[1:] // the AlternativesDir entry a non-empty scan starts with
	}
	num(int64(len(links)))
	for _, e := range links {
		field(e.Path[len(AlternativesDir)+1:])
		field(e.Target)
	}
	field("end")
	return b
}

// decodeScan parses a file's bytes into a scan of hostRoot, checking
// everything but the stamps' agreement with now.
func decodeScan(b []byte, hostRoot string) (*altScan, error) {
	next := func() (string, error) {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			return "", io.ErrUnexpectedEOF
		}
		v := string(b[:i])
		b = b[i+1:]
		return v, nil
	}
	var err error
	str := func() string {
		if err != nil {
			return ""
		}
		var v string
		v, err = next()
		return v
	}
	num := func(limit int64) int64 {
		v := str()
		if err != nil {
			return 0
		}
		var n int64
		if n, err = strconv.ParseInt(v, 10, 64); err == nil && (n < 0 || n > limit) {
			err = fmt.Errorf("number %d out of range", n)
		}
		return n
	}
	unum := func() uint64 {
		v := str()
		if err != nil {
			return 0
		}
		var n uint64
		n, err = strconv.ParseUint(v, 10, 64)
		return n
	}
	const anyNum = 1<<63 - 1
	if str() != scanFileMagic || err != nil {
		return nil, errors.New("not a scan file of this version")
	}
	if root := str(); err != nil || root != hostRoot {
		return nil, errors.New("another host root")
	}
	want := stampPaths(hostRoot)
	if n := num(int64(len(want))); err != nil || int(n) != len(want) {
		return nil, errors.New("another set of stamps")
	}
	s := &altScan{paths: want, stamps: make([]stamp, len(want))}
	for i := range want {
		if p := str(); err == nil && p != want[i] {
			return nil, errors.New("another set of stamps")
		}
		st := &s.stamps[i]
		st.ok = num(1) == 1
		st.mode = uint32(num(unix.S_IFMT))
		st.dev = unum()
		st.ino = unum()
		st.mtime.Sec, st.mtime.Nsec = num(anyNum), num(999999999)
		st.ctime.Sec, st.ctime.Nsec = num(anyNum), num(999999999)
	}
	n := num(MaxAlternatives)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		s.entries = make([]Entry, 0, n+1)
		s.entries = append(s.entries, Entry{Path: AlternativesDir, Kind: KindDir, Mode: 0o755})
	}
	prev := ""
	for range n {
		name, target := str(), str()
		if err != nil {
			return nil, err
		}
		e := Entry{Path: AlternativesDir + "/" + name, Kind: KindSymlink, Target: target}
		if _, ok := Alternative(e); !ok || name <= prev {
			return nil, fmt.Errorf("link %q: not one a scan makes", name)
		}
		prev = name
		s.entries = append(s.entries, e)
	}
	if str() != "end" || err != nil || len(b) != 0 {
		return nil, errors.New("incomplete or trailing bytes")
	}
	return s, nil
}
