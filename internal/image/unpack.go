package image

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// entryCost is what every archive entry costs against the size budget on
// top of its bytes, so a layer of a million empty files is a bomb too.
const entryCost = 512

// budget bounds the bytes an image may cost. One Resolve uses it from a
// single goroutine.
type budget struct {
	limit, used int64
	what        string
}

func (b *budget) charge(n int64) error {
	b.used += n
	if b.used > b.limit {
		return fmt.Errorf("%w: %s is above the %d-byte limit", ErrTooLarge, b.what, b.limit)
	}
	return nil
}

// chargedReader charges every byte read to a budget, and stops with the
// budget's error once it is spent.
type chargedReader struct {
	r io.Reader
	b *budget
}

func (c *chargedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if cerr := c.b.charge(int64(n)); cerr != nil {
		return n, cerr
	}
	return n, err
}

// ctxReader makes a long copy notice cancellation between reads.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// unpack extracts the uncompressed layer tar r into t, which is empty. It
// keeps the layer as it is: whiteouts become empty marker files, applied
// later by assemble. What it writes is charged to b.
//
// Safety: every entry is created by name in its parent directory, and the
// parent is opened beneath t's root without following any symlink
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS), so neither a ".." nor a
// symlink the layer made earlier can lead a write outside t. Hard links
// must name a file this layer already holds. Device nodes are skipped;
// setuid and setgid bits are dropped.
func unpack(ctx context.Context, r io.Reader, t *tree, b *budget) error {
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		if err := unpackEntry(ctx, t, hdr, tr, b); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	}
	return t.applyDirs()
}

func unpackEntry(ctx context.Context, t *tree, hdr *tar.Header, body io.Reader, b *budget) error {
	if err := b.charge(entryCost); err != nil {
		return err
	}
	rel, err := cleanPath(hdr.Name)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeGNUSparse, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		// Devices never enter a root (the sandbox has its own /dev);
		// global headers and unknown types carry nothing to create.
		return nil
	}
	if rel == "" {
		return nil // the layer's own root: the root directory's metadata is ours
	}
	parent, base := splitPath(rel)
	pfd, err := t.mkdirAll(parent)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)

	if strings.HasPrefix(base, whPrefix) {
		return whiteoutMarker(pfd, rel, base)
	}
	// Only the permission bits and the sticky bit survive: setuid and
	// setgid would grant nothing under no_new_privs, but no one needs them.
	mode := uint32(hdr.Mode) & 0o1777
	uid, gid := max(hdr.Uid, 0), max(hdr.Gid, 0)
	mtime := timespec(hdr.ModTime)

	if hdr.Typeflag == tar.TypeDir {
		var st unix.Stat_t
		err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(pfd, base); err != nil {
				return pathErr("remove", rel, err)
			}
			err = unix.ENOENT
		}
		if err == unix.ENOENT {
			err = unix.Mkdirat(pfd, base, 0o700)
		}
		if err != nil {
			return pathErr("mkdir", rel, err)
		}
		t.dirs[rel] = dirMeta{mode: mode, uid: uid, gid: gid, mtime: mtime}
		delete(t.implicit, rel)
		return nil
	}

	// A later entry replaces an earlier one of the same name, whatever
	// either is (tar semantics).
	if hdr.Typeflag == tar.TypeLink {
		return hardLink(t, pfd, rel, base, hdr.Linkname)
	}
	if err := removeAt(pfd, base); err != nil {
		return pathErr("remove", rel, err)
	}
	delete(t.dirs, rel)
	delete(t.implicit, rel)
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse:
		if err := writeFile(ctx, pfd, base, body, b); err != nil {
			return pathErr("write", rel, err)
		}
	case tar.TypeSymlink:
		// The target is kept verbatim, absolute or relative: it is data
		// for the sandbox, resolved only inside it.
		if err := unix.Symlinkat(hdr.Linkname, pfd, base); err != nil {
			return pathErr("symlink", rel, err)
		}
	case tar.TypeFifo:
		if err := unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0); err != nil {
			return pathErr("mkfifo", rel, err)
		}
	}
	if err := setMeta(pfd, base, hdr.Typeflag == tar.TypeSymlink, mode, uid, gid, mtime, t.chown); err != nil {
		return pathErr("chmod", rel, err)
	}
	return nil
}

// writeFile creates base in pfd (see createAt) and fills it from body.
func writeFile(ctx context.Context, pfd int, base string, body io.Reader, b *budget) error {
	fd, err := createAt(pfd, base)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	// Charged as read from the archive, so a sparse entry is charged its
	// full logical size, which is what it would take on disk here.
	_, err = io.Copy(f, &chargedReader{r: ctxReader{ctx, body}, b: b})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// whiteoutMarker records a whiteout as an empty file of the same name.
// Its target must be one plain name: ".wh..." (target "..") is refused.
func whiteoutMarker(pfd int, rel, base string) error {
	if base != opaqueMarker {
		if strings.HasPrefix(base, whPrefix+whPrefix) {
			return nil // other AUFS metadata (.wh..wh.plnk, ...): meaningless here
		}
		if !validName(base[len(whPrefix):]) {
			return fmt.Errorf("%w: whiteout %q names no valid entry", ErrUnsafeLayer, rel)
		}
	}
	if err := removeAt(pfd, base); err != nil {
		return pathErr("remove", rel, err)
	}
	fd, err := createAt(pfd, base)
	if err != nil {
		return pathErr("create", rel, err)
	}
	return unix.Close(fd)
}

// hardLink links rel to linkname, which must be a non-directory this
// layer already holds. Like entry names, an absolute linkname is taken
// relative to the layer's root, so a link to "/etc/passwd" means the
// layer's own etc/passwd, never the host's.
func hardLink(t *tree, pfd int, rel, base, linkname string) error {
	target, err := cleanPath(linkname)
	if err != nil {
		return err
	}
	if target == "" {
		return fmt.Errorf("%w: hard link to the layer's root", ErrUnsafeLayer)
	}
	if target == rel {
		return nil
	}
	tparent, tbase := splitPath(target)
	if strings.HasPrefix(tbase, whPrefix) {
		return fmt.Errorf("%w: hard link to whiteout %q", ErrUnsafeLayer, target)
	}
	tfd, err := t.openDir(tparent)
	if err != nil {
		return fmt.Errorf("%w: hard link to %q, which this layer does not hold: %w", ErrUnsafeLayer, target, err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%w: hard link to %q, which this layer does not hold: %w", ErrUnsafeLayer, target, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return fmt.Errorf("%w: hard link to directory %q", ErrUnsafeLayer, target)
	}
	if err := removeAt(pfd, base); err != nil {
		return pathErr("remove", rel, err)
	}
	delete(t.dirs, rel)
	delete(t.implicit, rel)
	// Flags 0: a link to a symlink links the symlink itself.
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return pathErr("link", rel, err)
	}
	return nil
}
