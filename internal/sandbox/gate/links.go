package gate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// maxScan bounds the directory entries one search for hard links reads
// under one bound host directory. A search that would need more fails the
// create: a link it did not find would be a way around the gate.
const maxScan = 2 << 20

// fileID identifies a file and the state of its name set: linking or
// unlinking a name changes its ctime and link count.
type fileID struct {
	dev, ino uint64
	nlink    uint64
	ctime    unix.Timespec
}

// linkCache remembers, per bound host directory and file, the names a
// search found, so only the first sandbox of a daemon pays for it (about a
// quarter second for a distribution's /usr). An entry is used only while
// the file's link count and ctime are what they were.
var linkCache = struct {
	sync.Mutex
	m map[linkKey][]string
}{m: map[linkKey][]string{}}

type linkKey struct {
	root string
	id   fileID
}

// hardLinks returns the host paths under roots (canonical directories)
// that are other names of the file id, for a file with more than one link.
func hardLinks(roots []string, id fileID) ([]string, error) {
	var out []string
	for _, root := range roots {
		var rst unix.Stat_t
		if err := unix.Stat(root, &rst); err != nil || rst.Dev != id.dev {
			continue // hard links never cross file systems
		}
		key := linkKey{root, id}
		linkCache.Lock()
		names, ok := linkCache.m[key]
		linkCache.Unlock()
		if !ok {
			var err error
			if names, err = scanLinks(root, id.dev, id.ino); err != nil {
				return nil, err
			}
			linkCache.Lock()
			if len(linkCache.m) > 4096 {
				clear(linkCache.m)
			}
			linkCache.m[key] = names
			linkCache.Unlock()
		}
		out = append(out, names...)
	}
	return out, nil
}

// scanLinks walks root on one device and returns every path whose
// directory entry names inode ino (the kernel's d_ino, so files are not
// stat'ed one by one); each hit is checked with lstat.
func scanLinks(root string, dev, ino uint64) ([]string, error) {
	var out []string
	seen := 0
	buf := make([]byte, 64<<10)
	stack := []string{root}
	for len(stack) > 0 {
		dir := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			continue // gone, or replaced by a non-directory, since it was listed
		}
		if err != nil {
			// A directory the search cannot enter (too deep a path, no
			// permission) could hold a link it would miss.
			return nil, fmt.Errorf("searching %s for hard links of a gated program: %w", dir, err)
		}
		var dst unix.Stat_t
		if err := unix.Fstat(fd, &dst); err != nil || dst.Dev != dev {
			unix.Close(fd)
			continue
		}
		for {
			n, err := unix.Getdents(fd, buf)
			if err != nil || n <= 0 {
				break
			}
			for b := buf[:n]; len(b) >= 19; {
				// struct linux_dirent64: ino u64, off i64, reclen u16, type u8, name
				dino := binary.NativeEndian.Uint64(b[0:8])
				reclen := int(binary.NativeEndian.Uint16(b[16:18]))
				typ := b[18]
				if reclen < 19 || reclen > len(b) {
					break
				}
				name := b[19:reclen]
				if i := bytes.IndexByte(name, 0); i >= 0 {
					name = name[:i]
				}
				b = b[reclen:]
				nm := string(name)
				if nm == "." || nm == ".." {
					continue
				}
				if seen++; seen > maxScan {
					unix.Close(fd)
					return nil, fmt.Errorf("%s holds more than %d entries to search for hard links of a gated program", root, maxScan)
				}
				p := strings.TrimSuffix(dir, "/") + "/" + nm
				switch typ {
				case unix.DT_DIR:
					stack = append(stack, p)
				case unix.DT_UNKNOWN:
					var st unix.Stat_t
					if err := unix.Lstat(p, &st); err != nil && !errors.Is(err, unix.ENOENT) {
						unix.Close(fd)
						return nil, fmt.Errorf("searching for hard links of a gated program: %w", err)
					}
					if st.Mode&unix.S_IFMT == unix.S_IFDIR {
						stack = append(stack, p)
					} else if st.Dev == dev && st.Ino == ino {
						out = append(out, p)
					}
				case unix.DT_REG:
					if dino == ino {
						var st unix.Stat_t
						if unix.Lstat(p, &st) == nil && st.Dev == dev && st.Ino == ino {
							out = append(out, p)
						}
					}
				}
			}
		}
		unix.Close(fd)
	}
	return out, nil
}
