package image_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/ironclaw/ironclaw/internal/image"
)

// TestHostileLayers feeds layers that try to write, link or delete outside
// the cache. Each must fail or land inside the image's own root, and the
// canary directory outside the cache must be untouched.
func TestHostileLayers(t *testing.T) {
	canary := t.TempDir()
	if err := os.WriteFile(filepath.Join(canary, "victim"), []byte("safe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(canary, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	up := strings.Repeat("../", 40)
	c := canary[1:] // the canary as a path relative to /

	cases := []struct {
		name   string
		layers [][]ent
		// wantErr is nil when the layer is neutralised rather than refused;
		// inRoot then names a file that must exist inside the root.
		wantErr error
		inRoot  string
	}{
		{"dotdot etc", [][]ent{{reg("../../etc/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"dotdot canary", [][]ent{{reg(up+c+"/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"inner dotdot", [][]ent{{dir("a/"), reg("a/../../x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"absolute etc", [][]ent{{reg("/etc/x", "abs")}}, nil, "etc/x"},
		{"absolute canary", [][]ent{{reg(canary+"/x", "abs")}}, nil, c + "/x"},
		{"symlink to / then file", [][]ent{{symlink("a", "/"), reg("a/etc/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"symlink to canary then file", [][]ent{{symlink("a", canary), reg("a/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"relative symlink up then file", [][]ent{{symlink("a", up+c), reg("a/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"symlink then file in subdir", [][]ent{{symlink("a", canary), reg("a/sub/x", "evil")}}, image.ErrUnsafeLayer, ""},
		{"symlink then dir entry", [][]ent{{symlink("a", canary), dir("a/"), reg("a/x", "in root")}}, nil, "a/x"},
		{"hard link to /etc/passwd", [][]ent{{hardlink("passwd", "/etc/passwd")}}, image.ErrUnsafeLayer, ""},
		{"hard link to canary", [][]ent{{hardlink("v", canary+"/victim")}}, image.ErrUnsafeLayer, ""},
		{"hard link dotdot", [][]ent{{hardlink("v", up+c+"/victim")}}, image.ErrUnsafeLayer, ""},
		{"hard link through symlink", [][]ent{{symlink("a", canary), hardlink("v", "a/victim")}}, image.ErrUnsafeLayer, ""},
		{"hard link to own etc/passwd", [][]ent{{reg("etc/passwd", "mine"), hardlink("pw", "/etc/passwd")}}, nil, "pw"},
		{"hard link to symlink", [][]ent{{symlink("s", canary+"/victim"), hardlink("h", "s")}}, nil, ""},
		{"whiteout dotdot name", [][]ent{{dir("d/"), reg("d/.wh...", "")}}, image.ErrUnsafeLayer, ""},
		{"whiteout dotdot path", [][]ent{{reg("../.wh.victim", "")}}, image.ErrUnsafeLayer, ""},
		{"whiteout up to canary", [][]ent{{reg(up+c+"/.wh.victim", "")}}, image.ErrUnsafeLayer, ""},
		{"lower symlink, upper file", [][]ent{{symlink("a", canary)}, {reg("a/x", "evil")}}, nil, "a/x"},
		{"lower symlink, upper whiteout", [][]ent{{symlink("a", canary)}, {reg("a/.wh.victim", "")}}, nil, ""},
		{"lower symlink, upper opaque", [][]ent{{symlink("a", canary)}, {dir("a/"), reg("a/.wh..wh..opq", "")}}, nil, ""},
		{"lower symlink up, upper implicit dir", [][]ent{{symlink("a", up+c)}, {reg("a/x", "in root")}}, nil, "a/x"},
		// The symlink is followed, but resolved inside the root: it leads to
		// the root's own copy of the canary's path.
		{"lower symlink into root, upper implicit dir", [][]ent{{dir(c + "/"), symlink("a", canary)}, {reg("a/x", "in root")}}, nil, c + "/x"},
		{"lower symlink, upper implicit whiteout", [][]ent{{dir(c + "/"), reg(c+"/victim", "own"), symlink("a", canary)}, {reg("a/.wh.victim", "")}}, nil, "a"},
		{"lower symlink, upper whiteout of it", [][]ent{{symlink("sub", canary+"/sub")}, {reg(".wh.sub", "")}}, nil, ""},
	}
	_, etcXErr := os.Lstat("/etc/x")
	var passwd syscall.Stat_t
	if err := syscall.Stat("/etc/passwd", &passwd); err != nil {
		t.Fatal(err)
	}
	before := listTree(t, canary)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ls []v1.Layer
			for _, ents := range tc.layers {
				ls = append(ls, layer(t, ents...))
			}
			s, cache := newStore(t, image.Options{})
			img, err := s.Resolve(t.Context(), writeLayout(t, []v1.Image{imageOf(t, ls...)}))
			switch {
			case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
				t.Errorf("Resolve = %v, want %v", err, tc.wantErr)
			case tc.wantErr == nil && err != nil:
				t.Errorf("Resolve = %v, want the layer neutralised", err)
			case tc.wantErr == nil && tc.inRoot != "":
				if _, err := os.Lstat(filepath.Join(img.RootDir, tc.inRoot)); err != nil {
					t.Errorf("%s not inside the root: %v", tc.inRoot, err)
				}
			}
			if tc.wantErr != nil {
				if n := dirNames(t, cache, "roots/sha256"); len(n) != 0 {
					t.Errorf("a root was made: %v", n)
				}
			}
			if n := dirNames(t, cache, "tmp"); len(n) != 0 {
				t.Errorf("tmp left behind: %v", n)
			}
			if after := listTree(t, canary); !reflect.DeepEqual(after, before) {
				t.Fatalf("canary changed:\n%v\nwas\n%v", after, before)
			}
			if _, err := os.Lstat("/etc/x"); etcXErr != nil && err == nil {
				t.Fatalf("/etc/x was created on the host")
			}
			var pw syscall.Stat_t
			if err := syscall.Stat("/etc/passwd", &pw); err != nil || pw.Nlink != passwd.Nlink {
				t.Fatalf("/etc/passwd link count %d, was %d (%v)", pw.Nlink, passwd.Nlink, err)
			}
		})
	}
}

func TestDigestMismatch(t *testing.T) {
	good := layer(t, reg("f", "good"))
	evil := layer(t, reg("f", "evil"))
	d := writeLayout(t, []v1.Image{imageOf(t, good)})
	// Swap the layer's blob for another valid layer: a layout's blobs are
	// read unchecked, so only the diffID check can catch it.
	dg, _ := good.Digest()
	rc, err := evil.Compressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "blobs", "sha256", dg.Hex), data, 0o644); err != nil {
		t.Fatal(err)
	}
	s, cache := newStore(t, image.Options{})
	if err := resolveErr(s, d); !errors.Is(err, image.ErrDigestMismatch) {
		t.Fatalf("Resolve(tampered layer) = %v, want ErrDigestMismatch", err)
	}
	for _, sub := range []string{"layers/sha256", "roots/sha256", "tmp"} {
		if n := dirNames(t, cache, sub); len(n) != 0 {
			t.Errorf("%s holds %v after a mismatch", sub, n)
		}
	}
}

func TestSizeLimit(t *testing.T) {
	const limit = 1 << 20
	many := make([]ent, 0, 3000)
	for i := range 3000 {
		many = append(many, reg(fmt.Sprintf("f%d", i), ""))
	}
	half := strings.Repeat("h", 600<<10)
	cases := []struct {
		name   string
		layers [][]ent
	}{
		{"one big file", [][]ent{{reg("big", strings.Repeat("\x00", 4<<20))}}},
		{"many empty files", [][]ent{many}},
		{"two layers together", [][]ent{{reg("a", half)}, {reg("b", half)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var ls []v1.Layer
			for _, ents := range tc.layers {
				ls = append(ls, layer(t, ents...))
			}
			s, cache := newStore(t, image.Options{MaxImageBytes: limit})
			if err := resolveErr(s, writeLayout(t, []v1.Image{imageOf(t, ls...)})); !errors.Is(err, image.ErrTooLarge) {
				t.Fatalf("Resolve = %v, want ErrTooLarge", err)
			}
			if n := dirNames(t, cache, "roots/sha256"); len(n) != 0 {
				t.Errorf("a root was made: %v", n)
			}
			if n := dirNames(t, cache, "tmp"); len(n) != 0 {
				t.Errorf("partial tree left in tmp: %v", n)
			}
			// Only a layer that fit on its own may stay cached.
			if n := dirNames(t, cache, "layers/sha256"); len(n) > len(tc.layers)-1 {
				t.Errorf("layers cached: %v", n)
			}
		})
	}
}
