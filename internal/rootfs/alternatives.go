package rootfs

import (
	"bytes"
	"encoding/binary"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/sys/unix"
)

// The alternatives of the host-toolchain view.
//
// Debian's update-alternatives points a program's generic name into /etc:
// /usr/bin/awk -> /etc/alternatives/awk -> /usr/bin/mawk. The view's /etc
// is synthetic, so it gains /etc/alternatives holding, as symlinks, exactly
// the alternatives the exposed bin directories use, and only those whose
// target lies in what the view exposes. Nothing else of the host's /etc
// shows: the only things read from it are these links' targets.
//
// In a plan they are
//
//	{Path: "/etc/alternatives", Kind: KindDir}
//	{Path: "/etc/alternatives/NAME", Kind: KindSymlink, Target: "/usr/..."}
//
// right after the synthetic /etc's files (Check accepts nothing else below
// /etc, see Alternative).

// AlternativesDir is where the view's alternatives links live.
const AlternativesDir = "/etc/alternatives"

// MaxAlternatives bounds the alternatives links of a plan; beyond it (in
// name order) they are left out.
const MaxAlternatives = 512

// maxAltTarget bounds an alternatives link's target (the host's are tens
// of bytes; a long one costs the sandbox's root a page).
const maxAltTarget = 255

// altBinDirs are the host directories whose symlinks are scanned for
// alternatives, inside the view; each only where it is a directory (not
// merged-usr's symlink into /usr).
var altBinDirs = []string{"/usr/bin", "/usr/sbin", "/bin", "/sbin"}

// Alternative reports whether e is one of the view's alternatives links: a
// symlink directly in AlternativesDir with a plain file name whose target
// is an absolute clean path beneath one of the directories the view
// exposes. It returns the link's name.
func Alternative(e Entry) (string, bool) {
	if e.Kind != KindSymlink {
		return "", false
	}
	dir, name := path.Split(e.Path)
	if dir != AlternativesDir+"/" || !plainName(name) || !altTarget(e.Target) {
		return "", false
	}
	return name, true
}

// plainName is a file name: no separator, not . or .., not too long.
func plainName(n string) bool {
	return n != "" && n != "." && n != ".." && len(n) <= 255 && !strings.ContainsAny(n, "/\x00")
}

// altTarget is an absolute clean path strictly beneath one of hostViewDirs.
func altTarget(t string) bool {
	if len(t) > maxAltTarget || !path.IsAbs(t) || path.Clean(t) != t || strings.ContainsRune(t, 0) {
		return false
	}
	top, rest, _ := strings.Cut(t[1:], "/")
	if rest == "" {
		return false
	}
	for _, d := range hostViewDirs {
		if top == d {
			return true
		}
	}
	return false
}

// The scan of a host root's alternatives is cached: seal.New plans the
// view on every sandbox create, and /usr/bin holds thousands of names. A
// scan stays valid while the directories it read are unchanged, which
// their stamps (lstat: device, inode, type, mtime, ctime) tell: replacing
// a link (update-alternatives renames a new one over it) or adding or
// removing one changes its directory's mtime. A scan whose stamps are
// within racyWindow of the time they were taken is not kept (a second
// change within the file system's timestamp granularity would go unseen),
// so the next plan scans again.
var altCache struct {
	sync.Mutex
	m map[string]*altScan
}

// altFlight runs one scan of a root at a time: the plans that miss the
// cache while it runs (beside WarmHostView's, say) share its result
// instead of reading the same directories beside it. A plan that shares
// a scan begun just before a change sees what the scan saw, as any plan
// racing update-alternatives may; the scan's stamps predate the change,
// so the next plan scans again.
var altFlight singleflight.Group

// altScans counts scans, for tests.
var altScans atomic.Int64

const racyWindow = 2 * time.Second

type stamp struct {
	ok           bool
	mode         uint32
	dev, ino     uint64
	mtime, ctime unix.Timespec
}

type altScan struct {
	paths   []string // stampPaths
	stamps  []stamp
	entries []Entry
}

// stampPaths are the host paths whose stamps validate a scan of hostRoot:
// the alternatives directory, then altBinDirs.
func stampPaths(hostRoot string) []string {
	out := []string{filepath.Join(hostRoot, AlternativesDir)}
	for _, d := range altBinDirs {
		out = append(out, filepath.Join(hostRoot, d))
	}
	return out
}

func takeStamp(p string) stamp {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return stamp{}
	}
	return stamp{ok: true, mode: st.Mode & unix.S_IFMT, dev: uint64(st.Dev), ino: st.Ino, mtime: st.Mtim, ctime: st.Ctim}
}

func (s stamp) isDir() bool { return s.ok && s.mode == unix.S_IFDIR }

// alternatives is the plan's alternatives entries for the host root
// (none when the host has none); see the top of this file. The caller
// must not change the slice's entries.
func alternatives(hostRoot string) []Entry {
	if entries, ok := cachedAlternatives(hostRoot); ok {
		return entries
	}
	v, _, _ := altFlight.Do(hostRoot, func() (any, error) {
		if entries, ok := cachedAlternatives(hostRoot); ok {
			return entries, nil // the scan that just ended stored it
		}
		return scanAndCache(hostRoot), nil
	})
	return v.([]Entry)
}

// cachedAlternatives returns the cached scan of hostRoot if the
// directories it read are unchanged.
func cachedAlternatives(hostRoot string) ([]Entry, bool) {
	altCache.Lock()
	c := altCache.m[hostRoot]
	altCache.Unlock()
	if c == nil {
		return nil, false
	}
	var buf [8]stamp
	stamps := buf[:len(c.paths)]
	for i, p := range c.paths {
		stamps[i] = takeStamp(p)
	}
	return c.entries, sameStamps(c.stamps, stamps)
}

// scanAndCache scans hostRoot's alternatives and caches the scan when it
// is complete and not racy.
func scanAndCache(hostRoot string) []Entry {
	paths := stampPaths(hostRoot)
	stamps := make([]stamp, len(paths))
	for i, p := range paths {
		stamps[i] = takeStamp(p)
	}
	now := time.Now()
	entries, complete := scanAlternatives(hostRoot, stamps)
	altCache.Lock()
	defer altCache.Unlock()
	if altCache.m == nil {
		altCache.m = map[string]*altScan{}
	}
	if complete && !racy(stamps, now) {
		altCache.m[hostRoot] = &altScan{paths: paths, stamps: stamps, entries: entries}
	} else {
		delete(altCache.m, hostRoot)
	}
	return entries
}

// WarmHostView reads what HostView's plan of hostRoot reads from the
// host (its alternatives), so that the first plan finds it ready. A
// runtime calls it in the background as it starts, and `ironclaw run`
// sooner, as soon as its command line names the command: a one-shot run
// then reads /usr/bin while it parses its flags and checks the host, not
// after. Calls that overlap share one scan.
func WarmHostView(hostRoot string) { alternatives(hostRoot) }

func sameStamps(a, b []stamp) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// racy: some stamp is too recent to tell a later change apart (or lies in
// the future).
func racy(stamps []stamp, now time.Time) bool {
	limit := now.Add(-racyWindow)
	for _, s := range stamps {
		if !s.ok {
			continue
		}
		for _, ts := range []unix.Timespec{s.mtime, s.ctime} {
			if !time.Unix(ts.Unix()).Before(limit) {
				return true
			}
		}
	}
	return false
}

// scanAlternatives reads the bin directories (those stamps say are
// directories) for links into AlternativesDir and each such alternative's
// target. complete is false when a directory could not be read.
//
// /usr/bin holds about a thousand names, a third of them links, and a
// one-shot `ironclaw run` waits for this scan: names are read in large
// getdents batches and links read relative to their directory's
// descriptor into one buffer, so no path is walked or built per name.
func scanAlternatives(hostRoot string, stamps []stamp) (_ []Entry, complete bool) {
	altScans.Add(1)
	complete = true
	if !stamps[0].isDir() {
		return nil, true // no alternatives on this host
	}
	var dents [32 << 10]byte
	var link [unix.PathMax]byte
	names := map[string]bool{}
	for i, dir := range altBinDirs {
		if !stamps[i+1].isDir() {
			continue
		}
		if !linksInto(filepath.Join(hostRoot, dir), dir, dents[:], link[:], names) {
			complete = false
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	altFd, err := unix.Open(filepath.Join(hostRoot, AlternativesDir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false
	}
	defer unix.Close(altFd)
	var out []Entry
	for _, n := range sorted {
		if len(out) == MaxAlternatives {
			break
		}
		k, err := unix.Readlinkat(altFd, n, link[:])
		if err != nil || k > maxAltTarget {
			continue // not a link, or one too long to be a view's target
		}
		if t := string(link[:k]); altTarget(t) {
			out = append(out, Entry{Path: AlternativesDir + "/" + n, Kind: KindSymlink, Target: t})
		} // else it leads out of the view
	}
	if len(out) == 0 {
		return nil, complete
	}
	return append([]Entry{{Path: AlternativesDir, Kind: KindDir, Mode: 0o755}}, out...), complete
}

// linksInto adds to names the alternatives the links of the host
// directory hostDir (the view's dir) point at, reading entries into dents
// and each link into link. It reports whether the whole directory was
// read.
func linksInto(hostDir, dir string, dents, link []byte, names map[string]bool) bool {
	fd, err := unix.Open(hostDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	prefix := AlternativesDir + "/"
	for {
		n, err := unix.Getdents(fd, dents)
		if err != nil {
			return false
		}
		if n == 0 {
			return true
		}
		for b := dents[:n]; len(b) >= direntHeader; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < direntHeader || reclen > len(b) {
				return false // a kernel that wrote this has a bug; say incomplete
			}
			typ, rec := b[18], b[direntHeader:reclen]
			b = b[reclen:]
			if typ != unix.DT_LNK && typ != unix.DT_UNKNOWN {
				continue
			}
			k, err := unix.Readlinkat(fd, direntName(rec), link)
			if err != nil || k == len(link) {
				continue // not a link (DT_UNKNOWN), or longer than a path
			}
			t := string(link[:k])
			if !path.IsAbs(t) {
				t = path.Join(dir, t) // dir is a directory: lexical is exact
			} else {
				t = path.Clean(t)
			}
			if alt, ok := strings.CutPrefix(t, prefix); ok && plainName(alt) {
				names[alt] = true
			}
		}
	}
}

// direntHeader is the size of linux_dirent64's fixed part: inode (8),
// offset (8), record length (2) and type (1).
const direntHeader = 19

// direntName is the NUL-terminated name at the start of b.
func direntName(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
