package image_test

import (
	"archive/tar"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironclaw/ironclaw/internal/image"
)

func TestLayoutDirectory(t *testing.T) {
	one := imageOf(t, layer(t, reg("etc/which", "one")))
	two := imageOf(t, layer(t, reg("etc/which", "two")))
	d := writeLayout(t, []v1.Image{one, two}, "v1", "v2")
	s, _ := newStore(t, image.Options{})

	got := resolve(t, s, d+":v2")
	if b, err := os.ReadFile(filepath.Join(got.RootDir, "etc/which")); err != nil || string(b) != "two" {
		t.Fatalf("dir:v2 gave %q %v, want two", b, err)
	}
	dg, _ := one.Digest()
	got = resolve(t, s, d+"@"+dg.String())
	if b, _ := os.ReadFile(filepath.Join(got.RootDir, "etc/which")); string(b) != "one" || got.Digest != dg.String() {
		t.Fatalf("dir@digest gave %q (digest %s), want one (%s)", b, got.Digest, dg)
	}
	id, _ := one.ConfigName()
	if got.ID != id.String() || got.RootDir != filepath.Join(filepath.Dir(got.RootDir), id.Hex) {
		t.Fatalf("ID %s RootDir %s, want config digest %s", got.ID, got.RootDir, id)
	}
	want := image.Config{Entrypoint: []string{"/bin/hello"}, Cmd: []string{"world"}, Env: []string{"PATH=/bin", "GREETING=hi"}, WorkingDir: "/work", User: "65532:65532"}
	if !reflect.DeepEqual(got.Config, want) {
		t.Fatalf("Config = %+v, want %+v", got.Config, want)
	}
	// Two images and no platform to choose by: the caller must say which.
	if err := resolveErr(s, d); !errors.Is(err, image.ErrNoManifest) {
		t.Fatalf("Resolve(two-image layout) = %v, want ErrNoManifest", err)
	}
	if err := resolveErr(s, d+":v3"); !errors.Is(err, image.ErrNoManifest) {
		t.Fatalf("Resolve(unknown tag) = %v, want ErrNoManifest", err)
	}
}

func TestTarballs(t *testing.T) {
	img := imageOf(t, layer(t, dir("etc/"), reg("etc/os-release", "ID=test\n")), layer(t, reg("bin/tool", "#!/bin/sh\n")))
	wantID, _ := img.ConfigName()
	tmp := t.TempDir()

	ociTar := filepath.Join(tmp, "oci.tar")
	tarDir(t, writeLayout(t, []v1.Image{img}, "latest"), ociTar)
	tag, err := name.NewTag("example.com/test/img:1.0")
	if err != nil {
		t.Fatal(err)
	}
	dockerTar := filepath.Join(tmp, "docker.tar")
	if err := tarball.WriteToFile(dockerTar, tag, img); err != nil {
		t.Fatal(err)
	}

	for _, ref := range []string{ociTar, ociTar + ":latest", dockerTar, dockerTar + ":example.com/test/img:1.0"} {
		t.Run(filepath.Base(ref), func(t *testing.T) {
			s, cache := newStore(t, image.Options{})
			got := resolve(t, s, ref)
			if got.ID != wantID.String() {
				t.Fatalf("ID = %s, want %s", got.ID, wantID)
			}
			tree := listTree(t, got.RootDir)
			if tree["etc/os-release"] != "file:ID=test\n" || tree["bin/tool"] != "file:#!/bin/sh\n" {
				t.Fatalf("root = %v", tree)
			}
			if n := dirNames(t, cache, "tmp"); len(n) != 0 {
				t.Fatalf("tmp left behind: %v", n)
			}
		})
	}
	s, _ := newStore(t, image.Options{})
	if err := resolveErr(s, dockerTar+":example.com/test/img:2.0"); !errors.Is(err, image.ErrNoManifest) {
		t.Fatalf("unknown docker tag: %v, want ErrNoManifest", err)
	}
}

func TestNotImage(t *testing.T) {
	s, _ := newStore(t, image.Options{})
	plain := t.TempDir()
	text := filepath.Join(plain, "notes.txt")
	if err := os.WriteFile(text, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{plain, text, "/no/such/dir", "./relative/missing", ""} {
		if err := resolveErr(s, ref); !errors.Is(err, image.ErrNotImage) {
			t.Errorf("Resolve(%q) = %v, want ErrNotImage", ref, err)
		}
	}
}

func TestWhiteouts(t *testing.T) {
	lower := layer(t,
		dir("a/"), reg("a/1", "a1"), reg("a/2", "a2"),
		dir("b/"), reg("b/1", "b1"), dir("b/sub/"), reg("b/sub/x", "bx"),
		dir("c/"), reg("c/keep", "keep"),
		dir("d/"), reg("d/f", "df"),
		reg("e", "a file that becomes a directory"),
	)
	upper := layer(t,
		reg("a/.wh.1", ""),
		dir("b/"), reg("b/.wh..wh..opq", ""), reg("b/new", "bnew"),
		reg(".wh.d", ""),
		reg("c/added", "added"),
		dir("e/"), reg("e/inner", "inner"),
		reg(".wh.never-existed", ""),
	)
	s, _ := newStore(t, image.Options{})
	got := resolve(t, s, writeLayout(t, []v1.Image{imageOf(t, lower, upper)}))
	want := map[string]string{
		"a": "dir", "a/2": "file:a2",
		"b": "dir", "b/new": "file:bnew",
		"c": "dir", "c/keep": "file:keep", "c/added": "file:added",
		"e": "dir", "e/inner": "file:inner",
	}
	if tree := listTree(t, got.RootDir); !reflect.DeepEqual(tree, want) {
		t.Fatalf("root =\n%v\nwant\n%v", tree, want)
	}
}

func TestLinksModesOwners(t *testing.T) {
	fifo := ent{hdr: regMode("pipe", "", 0o640, 0, 0).hdr}
	fifo.hdr.Typeflag = '6'
	dev := ent{hdr: regMode("dev/null", "", 0o666, 0, 0).hdr}
	dev.hdr.Typeflag, dev.hdr.Devmajor, dev.hdr.Devminor = '3', 1, 3
	l := layer(t,
		dir("bin/"),
		regMode("bin/suid", "x", 0o4755, 0, 0),
		regMode("bin/tool", "tool", 0o750, 1234, 5678),
		hardlink("bin/tool-link", "bin/tool"),
		hardlink("bin/tool-abs", "/bin/tool"),
		symlink("abs", "/etc/passwd"),
		symlink("rel", "../outside"),
		symlink("bin/sh", "busybox"),
		hardlink("sh-link", "bin/sh"),
		ent{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "ro/", Mode: 0o555, ModTime: testTime}},
		reg("ro/f", "in a read-only dir"),
		ent{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "sticky/", Mode: 0o3777, ModTime: testTime}},
		fifo, dev,
	)
	s, _ := newStore(t, image.Options{})
	root := resolve(t, s, writeLayout(t, []v1.Image{imageOf(t, l)})).RootDir

	st := func(p string) *syscall.Stat_t {
		var s syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(root, p), &s); err != nil {
			t.Fatalf("lstat %s: %v", p, err)
		}
		return &s
	}
	if m := st("bin/suid").Mode & 0o7777; m != 0o755 {
		t.Errorf("setuid file mode %o, want 755", m)
	}
	if m := st("sticky").Mode & 0o7777; m != 0o1777 {
		t.Errorf("sticky setgid dir mode %o, want 1777", m)
	}
	if m := st("ro").Mode & 0o7777; m != 0o555 {
		t.Errorf("read-only dir mode %o, want 555", m)
	}
	tool := st("bin/tool")
	if tool.Ino != st("bin/tool-link").Ino || tool.Ino != st("bin/tool-abs").Ino {
		t.Errorf("hard links are not one file")
	}
	if tool.Mode&0o777 != 0o750 || tool.Mtim.Sec != testTime.Unix() {
		t.Errorf("bin/tool mode %o mtime %d, want 750 %d", tool.Mode&0o777, tool.Mtim.Sec, testTime.Unix())
	}
	if os.Geteuid() == 0 && (tool.Uid != 1234 || tool.Gid != 5678) {
		t.Errorf("bin/tool owner %d:%d, want 1234:5678", tool.Uid, tool.Gid)
	}
	for p, want := range map[string]string{"abs": "/etc/passwd", "rel": "../outside", "bin/sh": "busybox", "sh-link": "busybox"} {
		if got, err := os.Readlink(filepath.Join(root, p)); err != nil || got != want {
			t.Errorf("readlink %s = %q %v, want %q", p, got, err, want)
		}
	}
	if st("pipe").Mode&syscall.S_IFMT != syscall.S_IFIFO {
		t.Errorf("pipe is not a fifo")
	}
	if _, err := os.Lstat(filepath.Join(root, "dev/null")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("device node was created: %v", err)
	}
}

// TestOpenSweepsCrashedWork: Open removes what a dead process left in tmp
// (old and unlocked) and keeps what a live one holds.
func TestOpenSweepsCrashedWork(t *testing.T) {
	cache := filepath.Join(t.TempDir(), "cache")
	if _, err := image.Open(cache, image.Options{}); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	for _, n := range []string{"layer-dead-1", "root-live-2"} {
		p := filepath.Join(cache, "tmp", n)
		if err := os.MkdirAll(filepath.Join(p, "fs", "etc"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	live, err := os.Open(filepath.Join(cache, "tmp", "root-live-2"))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if err := syscall.Flock(int(live.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	if _, err := image.Open(cache, image.Options{}); err != nil {
		t.Fatal(err)
	}
	if got := dirNames(t, cache, "tmp"); !reflect.DeepEqual(got, []string{"root-live-2"}) {
		t.Fatalf("tmp after Open = %v, want only the locked root-live-2", got)
	}
}

// TestImplicitDirectories: a layer that adds "lib/x" without listing
// "lib/" follows a lower layer's "lib -> usr/lib" (merged /usr), resolved
// inside the root, and leaves a lower directory's metadata alone.
func TestImplicitDirectories(t *testing.T) {
	opt := dir("opt/")
	opt.hdr.Mode = 0o700
	lower := layer(t, dir("usr/"), dir("usr/lib/"), reg("usr/lib/libc.so", "libc"),
		symlink("lib", "usr/lib"), symlink("lib64", "/usr/lib"), opt)
	upper := layer(t, reg("lib/extra.so", "extra"), reg("lib64/more.so", "more"), reg("opt/f", "f"))
	s, _ := newStore(t, image.Options{})
	root := resolve(t, s, writeLayout(t, []v1.Image{imageOf(t, lower, upper)})).RootDir
	tree := listTree(t, root)
	for p, want := range map[string]string{
		"lib": "link:usr/lib", "lib64": "link:/usr/lib",
		"usr/lib/libc.so": "file:libc", "usr/lib/extra.so": "file:extra", "usr/lib/more.so": "file:more",
	} {
		if tree[p] != want {
			t.Errorf("%s = %q, want %q (root %v)", p, tree[p], want, tree)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "opt")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("opt mode %v %v, want the lower layer's 0700", fi.Mode(), err)
	}
}
