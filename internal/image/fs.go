package image

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Whiteout names (OCI image spec, "Whiteouts"). A layer holding
// ".wh.<name>" deletes <name> from the layers below; ".wh..wh..opq" in a
// directory hides everything the layers below put in it.
const (
	whPrefix     = ".wh."
	opaqueMarker = ".wh..wh..opq"
)

// Limits on one path in a layer. Real images stay far below them; a path
// beyond them is an attack on the unpacker (deep recursion, fd use).
const (
	maxPathBytes = 4096
	maxPathDepth = 256
)

// cleanPath turns a tar entry name into a path relative to the tree's root
// ("" for the root itself). A leading "/" is dropped, as tar and containerd
// do, so an absolute name lands inside the tree; a ".." component is
// refused outright rather than clamped, because no honest layer has one.
func cleanPath(name string) (string, error) {
	if len(name) > maxPathBytes || strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: path %.64q... is too long or holds NUL", ErrUnsafeLayer, name)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("%w: path %q has a .. component", ErrUnsafeLayer, name)
		}
		parts = append(parts, p)
	}
	if len(parts) > maxPathDepth {
		return "", fmt.Errorf("%w: path %.64q... is deeper than %d", ErrUnsafeLayer, name, maxPathDepth)
	}
	return strings.Join(parts, "/"), nil
}

// validName reports whether n is usable as one path component.
func validName(n string) bool {
	return n != "" && n != "." && n != ".." && !strings.ContainsAny(n, "/\x00")
}

// splitPath splits a clean relative path into its parent ("" for the
// root) and its last component.
func splitPath(rel string) (parent, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

func joinPath(parent, base string) string {
	if parent == "" {
		return base
	}
	return parent + "/" + base
}

// dirMeta is a directory's final metadata. It is applied only once the
// tree is complete: a directory that ends up read-only (0555, or 0000) must
// stay writable while entries are created in it.
type dirMeta struct {
	mode     uint32
	uid, gid int
	mtime    unix.Timespec
}

// tree is a directory being built. Every path under it is opened beneath
// its root descriptor and never through a symlink, so nothing a layer put
// in the tree can redirect a write outside it.
type tree struct {
	root  int  // O_DIRECTORY descriptor of the tree's root
	chown bool // apply the archive's uid/gid (only root may)
	dirs  map[string]dirMeta
	// implicit holds the directories unpack made for entries whose parents
	// the archive did not list. When applied, they must not replace a lower
	// layer's directory metadata, nor a lower layer's symlink to a directory.
	implicit map[string]bool
}

func openTree(path string, chown bool) (*tree, error) {
	fd, err := openDirAt(unix.AT_FDCWD, path)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return &tree{root: fd, chown: chown, dirs: map[string]dirMeta{}, implicit: map[string]bool{}}, nil
}

func (t *tree) close() { unix.Close(t.root) }

// dirFlags open a directory without following a final symlink: on one,
// the open fails with ENOTDIR (see notDir).
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC

// openDirAt opens the directory name in dirfd (unix.AT_FDCWD: a path) with
// dirFlags.
func openDirAt(dirfd int, name string) (int, error) { return unix.Openat(dirfd, name, dirFlags, 0) }

// createAt creates the file name in dirfd for writing, mode 0600 until its
// metadata is applied. It must not exist: O_EXCL|O_NOFOLLOW also refuse a
// symlink there.
func createAt(dirfd int, name string) (int, error) {
	return unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
}

// notDir is the error for a path in the tree that should be a directory
// but is a symlink or a file: never a place to write through.
func notDir(rel string) error {
	return fmt.Errorf("%w: %q is not a directory (a symlink or file is in the way)", ErrUnsafeLayer, rel)
}

// resolveFlags confine openat2 to the tree: no "..", no absolute paths,
// no symlinks at all (a symlink in the tree is data, never a path to us).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openDir opens the existing directory rel ("" for the root).
func (t *tree) openDir(rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	fd, err := unix.Openat2(t.root, rel, &unix.OpenHow{
		Flags:   dirFlags,
		Resolve: resolveFlags,
	})
	if err == unix.ENOTDIR {
		// O_NOFOLLOW|O_DIRECTORY on a final symlink gives ENOTDIR: the
		// path leads through a symlink or a file, never a place to write.
		return -1, notDir(rel)
	}
	if err != nil {
		return -1, pathErr("open", rel, err)
	}
	return fd, nil
}

// mkdirAll opens directory rel, creating missing components one at a time
// (each beneath the last, never following a symlink). Directories made
// here were not in the archive; they get 0755 and root ownership, as
// Docker gives them.
func (t *tree) mkdirAll(rel string) (int, error) {
	fd, err := t.openDir(rel)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	cur, err := unix.Dup(t.root)
	if err != nil {
		return -1, err
	}
	done := ""
	for _, c := range strings.Split(rel, "/") {
		done = joinPath(done, c)
		if err := unix.Mkdirat(cur, c, 0o700); err == nil {
			t.dirs[done] = dirMeta{mode: 0o755}
			t.implicit[done] = true
		} else if err != unix.EEXIST {
			unix.Close(cur)
			return -1, pathErr("mkdir", done, err)
		}
		next, err := openDirAt(cur, c)
		unix.Close(cur)
		if err == unix.ENOTDIR {
			return -1, notDir(done)
		}
		if err != nil {
			return -1, pathErr("open", done, err)
		}
		cur = next
	}
	return cur, nil
}

// pathErr wraps a system error on a path in the tree; the errors that mean
// "a symlink or .. was in the way" become ErrUnsafeLayer.
func pathErr(op, rel string, err error) error {
	if err == unix.ELOOP || err == unix.EXDEV {
		return fmt.Errorf("%w: %s %q: goes through a symlink or outside the tree: %w", ErrUnsafeLayer, op, rel, err)
	}
	return &fs.PathError{Op: op, Path: rel, Err: err}
}

// applyDirs gives every directory recorded in t.dirs its final metadata,
// deepest first, so a directory's mtime is set after its children were
// changed. A recorded path that is gone or no longer a directory (a later
// layer removed or replaced it) is skipped.
func (t *tree) applyDirs() error {
	paths := make([]string, 0, len(t.dirs))
	for p := range t.dirs {
		paths = append(paths, p)
	}
	sort.Slice(paths, func(i, j int) bool {
		di, dj := strings.Count(paths[i], "/"), strings.Count(paths[j], "/")
		if di != dj {
			return di > dj
		}
		return paths[i] < paths[j]
	})
	for _, p := range paths {
		m := t.dirs[p]
		parent, base := splitPath(p)
		pfd, err := t.openDir(parent)
		if err != nil {
			continue
		}
		err = setDirMeta(pfd, base, m, t.chown)
		unix.Close(pfd)
		if err != nil && err != unix.ENOENT && err != unix.ENOTDIR && err != unix.ELOOP {
			return pathErr("chmod", p, err)
		}
	}
	return nil
}

func setDirMeta(pfd int, base string, m dirMeta, chown bool) error {
	fd, err := openDirAt(pfd, base)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if chown {
		if err := unix.Fchown(fd, m.uid, m.gid); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, m.mode); err != nil {
		return err
	}
	if m.mtime != (unix.Timespec{}) {
		return unix.UtimesNanoAt(pfd, base, []unix.Timespec{m.mtime, m.mtime}, unix.AT_SYMLINK_NOFOLLOW)
	}
	return nil
}

// setMeta gives a non-directory entry, just created by us as base in pfd,
// its owner, mode and mtime without following it if it is a symlink.
func setMeta(pfd int, base string, isLink bool, mode uint32, uid, gid int, mtime unix.Timespec, chown bool) error {
	if chown {
		if err := unix.Fchownat(pfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	if !isLink {
		// fchmodat follows a final symlink, but base is not one: we created
		// it a moment ago in a tree no one else writes.
		if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
			return err
		}
	}
	return unix.UtimesNanoAt(pfd, base, []unix.Timespec{mtime, mtime}, unix.AT_SYMLINK_NOFOLLOW)
}

// removeAt removes base in dirfd and, if it is a directory, everything in
// it, never following a symlink. A missing base is not an error.
func removeAt(dirfd int, base string) error {
	err := unix.Unlinkat(dirfd, base, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	if err := unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR); err == nil || err == unix.ENOENT {
		return nil
	} else if err != unix.ENOTEMPTY && err != unix.EEXIST {
		return err
	}
	fd, err := openDirAt(dirfd, base)
	if err != nil {
		return err
	}
	err = clearDir(fd)
	unix.Close(fd)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
}

// clearDir removes everything in the directory fd.
func clearDir(fd int) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := removeAt(fd, n); err != nil {
			return err
		}
	}
	return nil
}

// readNames lists the directory fd (sorted), leaving fd open.
func readNames(fd int) ([]string, error) {
	dup, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil && err != io.EOF {
		return nil, err
	}
	sort.Strings(names)
	return names, nil
}

// removeTree removes a directory of ours (a temporary tree). When running
// unprivileged, a read-only directory in it would stop os.RemoveAll, so on
// failure every directory is made writable first.
func removeTree(path string) error {
	if err := os.RemoveAll(path); err == nil {
		return nil
	}
	filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(path)
}

func timespec(t time.Time) unix.Timespec {
	ts, err := unix.TimeToTimespec(t)
	if err != nil {
		return unix.Timespec{} // out of range on this arch: the epoch will do
	}
	return ts
}
