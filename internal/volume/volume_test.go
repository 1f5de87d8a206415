package volume

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/ironclaw/ironclaw/internal/errdefs"
	"github.com/ironclaw/ironclaw/internal/store"
)

func newManager(t *testing.T, opts Options) (*Manager, *store.Store, string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("volumes need root (loop devices)")
	}
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "ironclaw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := New(context.Background(), st, filepath.Join(dir, "volumes"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close(context.Background()) })
	return m, st, dir
}

func TestVolumeIsAQuotaAndOutlivesTheManager(t *testing.T) {
	ctx := context.Background()
	m, st, dir := newManager(t, Options{})
	v, err := m.Create(ctx, "agent", "data", MinBytes)
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeBytes != MinBytes || v.Principal != "agent" {
		t.Fatalf("created %+v", v)
	}
	mounts, err := m.Attach(ctx, "agent", "sbx-1", []Mount{{Name: "data", Path: "/workspace/data"}})
	if err != nil || len(mounts) != 1 || mounts[0].Target != "/workspace/data" || mounts[0].ReadOnly {
		t.Fatalf("attach: %+v %v", mounts, err)
	}
	src := mounts[0].Source
	if err := os.WriteFile(filepath.Join(src, "keep.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The filesystem's size is the quota: writing past it is ENOSPC, and
	// the image file on the host never grows past the size.
	big := bytes.Repeat([]byte{1}, 1<<20)
	f, err := os.Create(filepath.Join(src, "fill"))
	if err != nil {
		t.Fatal(err)
	}
	var werr error
	for i := 0; i < 64 && werr == nil; i++ {
		_, werr = f.Write(big)
		if werr == nil {
			werr = f.Sync()
		}
	}
	f.Close()
	if !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("filling a %d-byte volume: %v, want ENOSPC", MinBytes, werr)
	}
	if fi, err := os.Stat(m.image("data")); err != nil || fi.Size() != MinBytes {
		t.Fatalf("image: %v %v", fi, err)
	}
	os.Remove(filepath.Join(src, "fill"))

	// One sandbox at a time; free again once released.
	if _, err := m.Attach(ctx, "agent", "sbx-2", []Mount{{Name: "data", Path: "/data"}}); !errors.Is(err, ErrInUse) || !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second attach: %v, want ErrInUse", err)
	}
	if err := m.Delete(ctx, "agent", "data", false); !errors.Is(err, ErrInUse) {
		t.Fatalf("delete while attached: %v", err)
	}
	m.Release("sbx-1")
	if got, _ := m.Get(ctx, "agent", "data", false); got.Sandbox != "" {
		t.Fatalf("still attached to %q after release", got.Sandbox)
	}

	// A new manager (a daemon restart) mounts it again with its files.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2, err := New(ctx, st, filepath.Join(dir, "volumes"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close(ctx)
	mounts, err = m2.Attach(ctx, "agent", "sbx-3", []Mount{{Name: "data", Path: "/data"}})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(mounts[0].Source, "keep.txt")); err != nil || string(got) != "kept" {
		t.Fatalf("after restart: %q %v", got, err)
	}
	m2.Release("sbx-3")
	if err := m2.Delete(ctx, "agent", "data", false); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(m2.image("data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("image left after delete: %v", err)
	}
	if _, err := m2.Get(ctx, "agent", "data", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestVolumeRequestsAreBounded(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, Options{MaxBytes: 64 << 20, PerPrincipal: 2, TotalBytes: 48 << 20})
	for _, c := range []struct {
		name string
		size int64
		want error
	}{
		{"../etc", MinBytes, ErrInvalid},
		{"Upper", MinBytes, ErrInvalid},
		{"", MinBytes, ErrInvalid},
		{"tiny", MinBytes - 1, ErrInvalid},
		{"huge", 65 << 20, ErrInvalid},
	} {
		if _, err := m.Create(ctx, "agent", c.name, c.size); !errors.Is(err, c.want) {
			t.Errorf("Create(%q, %d) = %v, want %v", c.name, c.size, err, c.want)
		}
	}
	if _, err := m.Create(ctx, "agent", "a", 32<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "agent", "a", MinBytes); !errors.Is(err, ErrExists) {
		t.Fatalf("same name: %v", err)
	}
	if _, err := m.Create(ctx, "agent", "b", 32<<20); !errors.Is(err, ErrQuota) {
		t.Fatalf("over the total: %v", err)
	}
	if _, err := m.Create(ctx, "agent", "b", MinBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create(ctx, "agent", "c", MinBytes); !errors.Is(err, ErrQuota) {
		t.Fatalf("over the count: %v", err)
	}
	// Another principal's volume does not exist for it, and its quota is
	// its own.
	if _, err := m.Get(ctx, "agent:other", "a", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign get: %v", err)
	}
	if _, err := m.Attach(ctx, "agent:other", "sbx-9", []Mount{{Name: "a", Path: "/a"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign attach: %v", err)
	}
	if err := m.Delete(ctx, "agent:other", "a", false); !errors.Is(err, ErrNotFound) {
		t.Fatalf("foreign delete: %v", err)
	}
	if _, err := m.Create(ctx, "agent:other", "c", MinBytes); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]Mount{
		{{Name: "a", Path: "relative"}},
		{{Name: "a", Path: "/workspace"}},
		{{Name: "a", Path: "/"}},
		{{Name: "a", Path: "/x/../etc"}},
		{{Name: "a", Path: "/a"}, {Name: "b", Path: "/a"}},
		{{Name: "a", Path: "/a"}, {Name: "a", Path: "/b"}},
	} {
		if _, err := m.Attach(ctx, "agent", "sbx-1", bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("Attach(%+v) = %v, want ErrInvalid", bad, err)
		}
	}
	// A refused attach reserves nothing.
	if _, err := m.Attach(ctx, "agent", "sbx-1", []Mount{{Name: "a", Path: "/a"}, {Name: "nope", Path: "/b"}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("attach with an unknown volume: %v", err)
	}
	if _, err := m.Attach(ctx, "agent", "sbx-2", []Mount{{Name: "a", Path: "/a"}}); err != nil {
		t.Fatalf("a is still reserved after a refused attach: %v", err)
	}
	list, err := m.List(ctx, "agent", false)
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[0].Sandbox != "sbx-2" {
		t.Fatalf("list: %+v %v", list, err)
	}
	if all, _ := m.List(ctx, "", true); len(all) != 3 {
		t.Fatalf("operator list: %+v", all)
	}
}

func TestReholdMovesAReservation(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, Options{})
	if _, err := m.Create(ctx, "agent", "v", MinBytes); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Attach(ctx, "agent", "create-1", []Mount{{Name: "v", Path: "/v"}}); err != nil {
		t.Fatal(err)
	}
	m.Rehold("create-1", "sbx-1")
	if v, _ := m.Get(ctx, "agent", "v", false); v.Sandbox != "sbx-1" {
		t.Fatalf("held by %q after Rehold, want sbx-1", v.Sandbox)
	}
	m.Release("create-1") // the old key holds nothing any more
	if v, _ := m.Get(ctx, "agent", "v", false); v.Sandbox != "sbx-1" {
		t.Fatalf("released through the old key: %q", v.Sandbox)
	}
	m.Release("sbx-1")
	if v, _ := m.Get(ctx, "agent", "v", false); v.Sandbox != "" {
		t.Fatalf("still held by %q", v.Sandbox)
	}
}

// No name makes one volume's paths another's ("a.ext4" beside "a").
func TestVolumeNamesDoNotCollide(t *testing.T) {
	ctx := context.Background()
	m, _, _ := newManager(t, Options{})
	for _, n := range []string{"a", "a.ext4", "images", "mounts"} {
		if _, err := m.Create(ctx, "agent", n, MinBytes); err != nil {
			t.Fatalf("create %s: %v", n, err)
		}
	}
	seen := map[string]string{}
	for _, n := range []string{"a", "a.ext4", "images", "mounts"} {
		for _, p := range []string{m.image(n), m.data(n)} {
			if other, dup := seen[p]; dup {
				t.Fatalf("%s and %s share %s", n, other, p)
			}
			seen[p] = n
		}
		if !isMountPoint(m.data(n)) {
			t.Fatalf("%s is not mounted", n)
		}
	}
}

// A volume whose file was lost (a crash mid-create) does not keep the
// others or the daemon from starting; it is refused at attach and can be
// deleted. A file no volume names is removed.
func TestNewSurvivesALostVolume(t *testing.T) {
	ctx := context.Background()
	m, st, dir := newManager(t, Options{})
	for _, n := range []string{"lost", "fine"} {
		if _, err := m.Create(ctx, "agent", n, MinBytes); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.image("lost")); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, "volumes", "images", "orphan.ext4")
	if err := os.WriteFile(orphan, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	m2, err := New(ctx, st, filepath.Join(dir, "volumes"), Options{})
	if err != nil {
		t.Fatalf("a lost volume kept the manager from starting: %v", err)
	}
	defer m2.Close(ctx)
	if len(m2.Broken()) != 1 {
		t.Fatalf("broken: %v", m2.Broken())
	}
	if _, err := m2.Attach(ctx, "agent", "sbx-1", []Mount{{Name: "lost", Path: "/lost"}}); err == nil {
		t.Fatal("a lost volume was attached")
	}
	if _, err := m2.Attach(ctx, "agent", "sbx-1", []Mount{{Name: "fine", Path: "/fine"}}); err != nil {
		t.Fatal(err)
	}
	if err := m2.Delete(ctx, "agent", "lost", false); err != nil {
		t.Fatalf("delete a lost volume: %v", err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("orphan image kept: %v", err)
	}
}
