package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// assemble applies unpacked layer trees, bottom first, to the empty tree
// t: the same result as stacking them in overlayfs.
//
// Files are hard-linked from the layer trees, not copied: a root costs no
// data blocks and no copy time, and sharing inodes is safe because both
// sides are immutable once renamed into the cache (the root is bound
// read-only into sandboxes; nothing rewrites a layer tree). Directories
// are made fresh, since they differ per image. Where a link is impossible
// (too many links to one inode, another filesystem) the entry is copied.
func assemble(ctx context.Context, t *tree, layers []unpacked) error {
	for _, l := range layers {
		src, err := openDirAt(unix.AT_FDCWD, l.dir)
		if err != nil {
			return fmt.Errorf("open layer %s: %w", l.dir, err)
		}
		dst, err := unix.Dup(t.root)
		if err != nil {
			unix.Close(src)
			return err
		}
		err = t.apply(ctx, l.implicit, src, dst, "", "")
		unix.Close(src)
		unix.Close(dst)
		if err != nil {
			return fmt.Errorf("apply layer %s: %w", l.dir, err)
		}
	}
	return t.applyDirs()
}

// unpacked is a layer's tree in the cache.
type unpacked struct {
	dir      string
	implicit map[string]bool // directories the layer's archive did not list
}

// apply merges the layer directory src (at srcRel in the layer) into the
// root directory dst (at rel in the root). Descriptors are opened with
// O_NOFOLLOW, so a symlink is never entered, with one exception: a
// directory the archive did not list, where a lower layer has a symlink to
// a directory (merged /usr: "lib -> usr/lib", then a layer adding
// "lib/x/y"). Then, as containerd does, the symlink is followed, but
// resolved with openat2(RESOLVE_IN_ROOT), so it cannot leave the root.
func (t *tree) apply(ctx context.Context, implicit map[string]bool, src, dst int, srcRel, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(src)
	if err != nil {
		return pathErr("readdir", rel, err)
	}
	// Whiteouts hide what lower layers put here, never what this layer
	// adds, so they all go first.
	for _, n := range names {
		if !strings.HasPrefix(n, whPrefix) {
			continue
		}
		switch {
		case n == opaqueMarker:
			if err := clearDir(dst); err != nil {
				return pathErr("clear", rel, err)
			}
		case strings.HasPrefix(n, whPrefix+whPrefix):
		default:
			target := n[len(whPrefix):]
			if !validName(target) { // unpack refuses these; a tree is checked again anyway
				return fmt.Errorf("%w: whiteout %q", ErrUnsafeLayer, joinPath(rel, n))
			}
			if err := removeAt(dst, target); err != nil {
				return pathErr("remove", joinPath(rel, target), err)
			}
		}
	}
	for _, n := range names {
		if strings.HasPrefix(n, whPrefix) {
			continue
		}
		child, srcChild := joinPath(rel, n), joinPath(srcRel, n)
		var st unix.Stat_t
		if err := unix.Fstatat(src, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return pathErr("stat", child, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			if err := t.mergeDir(ctx, implicit, src, dst, n, srcChild, child, &st); err != nil {
				return err
			}
			continue
		}
		if err := removeAt(dst, n); err != nil {
			return pathErr("remove", child, err)
		}
		err := unix.Linkat(src, n, dst, n, 0)
		if err == unix.EMLINK || err == unix.EXDEV || err == unix.EPERM {
			err = copyEntry(src, dst, n, &st, t.chown)
		}
		if err != nil {
			return pathErr("link", child, err)
		}
	}
	return nil
}

// mergeDir applies the layer's directory n (in src, at srcRel in the
// layer) to the root's entry n in dst (at rel): into the directory there,
// or a new one in place of whatever else is there.
func (t *tree) mergeDir(ctx context.Context, implicit map[string]bool, src, dst int, n, srcRel, rel string, st *unix.Stat_t) error {
	var dt unix.Stat_t
	err := unix.Fstatat(dst, n, &dt, unix.AT_SYMLINK_NOFOLLOW)
	dtype := dt.Mode & unix.S_IFMT
	meta := dirMeta{mode: st.Mode & 0o7777, uid: int(st.Uid), gid: int(st.Gid), mtime: st.Mtim}
	switch {
	case err == nil && dtype == unix.S_IFDIR:
		// A directory the archive listed brings its metadata; one it did
		// not keeps the lower layer's.
		if !implicit[srcRel] {
			t.dirs[rel] = meta
		}
	case err == nil && dtype == unix.S_IFLNK && implicit[srcRel]:
		if fd, real, ok := t.resolveInRoot(rel); ok {
			return t.applyChild(ctx, implicit, src, fd, n, srcRel, real)
		}
		fallthrough // a dangling symlink, or one to a file: replaced
	case err == nil:
		if err := removeAt(dst, n); err != nil {
			return pathErr("remove", rel, err)
		}
		fallthrough
	case err == unix.ENOENT:
		if err := unix.Mkdirat(dst, n, 0o700); err != nil {
			return pathErr("mkdir", rel, err)
		}
		t.dirs[rel] = meta
	default:
		return pathErr("stat", rel, err)
	}
	d, err := openDirAt(dst, n)
	if err != nil {
		return pathErr("open", rel, err)
	}
	return t.applyChild(ctx, implicit, src, d, n, srcRel, rel)
}

// applyChild applies the layer's directory n (in src) to the root's
// directory d at rel, and closes d.
func (t *tree) applyChild(ctx context.Context, implicit map[string]bool, src, d int, n, srcRel, rel string) error {
	defer unix.Close(d)
	s, err := openDirAt(src, n)
	if err != nil {
		return pathErr("open", srcRel, err)
	}
	defer unix.Close(s)
	return t.apply(ctx, implicit, s, d, srcRel, rel)
}

// resolveInRoot opens the directory a symlink at rel leads to, resolving
// it as if the root were "/", and says where in the root it is.
func (t *tree) resolveInRoot(rel string) (int, string, bool) {
	fd, err := unix.Openat2(t.root, rel, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
	if err != nil {
		return -1, "", false
	}
	// Both paths come from the kernel, so neither holds a symlink.
	real, err := fdPath(fd)
	top, terr := fdPath(t.root)
	if err == nil && terr == nil {
		if real == top {
			return fd, "", true
		}
		if r, ok := strings.CutPrefix(real, top+"/"); ok {
			return fd, r, true
		}
	}
	unix.Close(fd)
	return -1, "", false
}

// copyEntry copies the non-directory n from src to dst, keeping owner,
// mode and mtime.
func copyEntry(src, dst int, n string, st *unix.Stat_t, chown bool) error {
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		in, err := unix.Openat(src, n, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		inf := os.NewFile(uintptr(in), n)
		defer inf.Close()
		out, err := createAt(dst, n)
		if err != nil {
			return err
		}
		outf := os.NewFile(uintptr(out), n)
		_, err = io.Copy(outf, inf)
		if cerr := outf.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case unix.S_IFLNK:
		buf := make([]byte, unix.PathMax)
		k, err := unix.Readlinkat(src, n, buf)
		if err != nil {
			return err
		}
		if err := unix.Symlinkat(string(buf[:k]), dst, n); err != nil {
			return err
		}
	case unix.S_IFIFO:
		if err := unix.Mknodat(dst, n, unix.S_IFIFO|0o600, 0); err != nil {
			return err
		}
	default:
		return nil // unpack makes nothing else
	}
	isLink := st.Mode&unix.S_IFMT == unix.S_IFLNK
	return setMeta(dst, n, isLink, st.Mode&0o7777, int(st.Uid), int(st.Gid), st.Mtim, chown)
}

func fdPath(fd int) (string, error) { return os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)) }
