package rootfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestHostView(t *testing.T) {
	host := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "lib64", "etc", "home/alice", "var/run"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(host, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "etc", "shadow"), []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	got := map[string]Entry{}
	for _, e := range entries {
		got[e.Path] = e
		if strings.Contains(e.Content, "secret") || strings.HasPrefix(e.Source, filepath.Join(host, "etc")) {
			t.Fatalf("host /etc leaked into the plan: %+v", e)
		}
	}
	if e := got["/usr"]; e.Kind != KindBindDir || e.Source != filepath.Join(host, "usr") {
		t.Errorf("/usr = %+v", e)
	}
	if e := got["/bin"]; e.Kind != KindSymlink || e.Target != "usr/bin" {
		t.Errorf("/bin = %+v, want the host's symlink", e)
	}
	if _, ok := got["/lib64"]; !ok {
		t.Error("/lib64 missing")
	}
	for _, p := range []string{"/home", "/var", "/sbin", "/etc/shadow"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s is in the host view", p)
		}
	}
	if e := got["/etc/passwd"]; e.Kind != KindFile || !strings.Contains(e.Content, "sandbox:x:65532:65532") {
		t.Errorf("/etc/passwd = %+v", e)
	}
	if !strings.Contains(got["/etc/hosts"].Content, "box") {
		t.Errorf("hostname not in /etc/hosts: %q", got["/etc/hosts"].Content)
	}
}

func TestHostViewNeedsUsr(t *testing.T) {
	if _, err := HostView(t.TempDir(), "box"); err == nil {
		t.Fatal("a host without /usr gave a plan")
	}
}

func TestDirectory(t *testing.T) {
	img := t.TempDir()
	for _, d := range []string{"bin", "etc", "proc", "tmp", "workspace", MaskDir} {
		if err := os.Mkdir(filepath.Join(img, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(img, "marker"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/bin", filepath.Join(img, "sbin")); err != nil {
		t.Fatal(err)
	}
	entries, err := Directory(img)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, e := range entries {
		paths = append(paths, e.Path+":"+string(e.Kind))
	}
	want := "/bin:bind-dir /etc:bind-dir /marker:bind-file /sbin:symlink"
	if strings.Join(paths, " ") != want {
		t.Fatalf("Directory = %q, want %q (proc, tmp, workspace and %s are the sandbox's own)", strings.Join(paths, " "), want, MaskDir)
	}
	if _, err := Directory(filepath.Join(img, "marker")); err == nil {
		t.Fatal("a file was accepted as an image directory")
	}
	if _, err := Directory(filepath.Join(img, "nope")); err == nil {
		t.Fatal("a missing directory was accepted")
	}
}

func TestCheck(t *testing.T) {
	bad := [][]Entry{
		{{Path: "relative", Kind: KindDir}},
		{{Path: "/", Kind: KindDir}},
		{{Path: "/a/../b", Kind: KindDir}},
		{{Path: "/x", Kind: KindBindDir, Source: "rel"}},
		{{Path: "/x", Kind: "weird"}},
		{{Path: "/" + MaskDir, Kind: KindDir}}, // the native root's own
	}
	for _, es := range bad {
		if err := Check(es); err == nil {
			t.Errorf("Check(%+v) accepted", es)
		}
	}
}

// fakeDebian is a host root with Debian's alternatives: links in usr/bin
// and usr/sbin into etc/alternatives, some of whose targets lie outside
// what the view exposes.
func fakeDebian(t *testing.T) string {
	host := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib/jvm/bin", "etc/alternatives", "opt/x"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range [][2]string{
		{"usr/bin", "usr/bin"}, {"usr/sbin", "usr/sbin"}, {"lib", "usr/lib"}, // merged usr
		{"usr/bin/awk", "/etc/alternatives/awk"},
		{"usr/bin/nawk", "/etc/alternatives/nawk"},
		{"usr/bin/pager", "../../etc/alternatives/pager"}, // relative
		{"usr/bin/java", "/etc/alternatives/java"},
		{"usr/bin/optx", "/etc/alternatives/optx"},     // target outside the view
		{"usr/bin/cfg", "/etc/alternatives/cfg"},       // target in /etc
		{"usr/bin/rel", "/etc/alternatives/rel"},       // relative target
		{"usr/bin/dirty", "/etc/alternatives/dirty"},   // unclean target
		{"usr/bin/nested", "/etc/alternatives/a/b"},    // not a plain name
		{"usr/bin/gone", "/etc/alternatives/gone"},     // dangling on the host
		{"usr/sbin/sendmail", "/etc/alternatives/mta"}, // in sbin
		{"usr/bin/sh", "dash"},                         // not an alternative
		{"etc/alternatives/awk", "/usr/bin/mawk"},
		{"etc/alternatives/nawk", "/usr/bin/mawk"},
		{"etc/alternatives/pager", "/usr/bin/less"},
		{"etc/alternatives/java", "/usr/lib/jvm/bin/java"},
		{"etc/alternatives/optx", "/opt/x/x"},
		{"etc/alternatives/cfg", "/etc/shadow"},
		{"etc/alternatives/rel", "../usr/bin/mawk"},
		{"etc/alternatives/dirty", "/usr/../etc/shadow"},
		{"etc/alternatives/mta", "/usr/sbin/exim4"},
		{"etc/alternatives/unused", "/usr/bin/unused"}, // no exposed name uses it
		{"etc/alternatives/pager.1.gz", "/usr/share/man/man1/less.1.gz"},
	} {
		if l[0] == l[1] {
			continue
		}
		if err := os.Symlink(l[1], filepath.Join(host, l[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/bin", filepath.Join(host, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "etc/alternatives/a"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return host
}

func alternativesOf(t *testing.T, entries []Entry) string {
	t.Helper()
	var out []string
	for i, e := range entries {
		if strings.HasPrefix(e.Path, AlternativesDir) {
			if e.Path == AlternativesDir {
				if e.Kind != KindDir || i == 0 || entries[i-1].Kind != KindFile {
					t.Errorf("%s = %+v, at %d: want a directory after /etc's files", e.Path, e, i)
				}
				continue
			}
			if e.Kind != KindSymlink {
				t.Errorf("%+v is not a symlink", e)
			}
			out = append(out, strings.TrimPrefix(e.Path, AlternativesDir+"/")+"="+e.Target)
		}
	}
	return strings.Join(out, " ")
}

// ageDirs sets the stamped directories' times into the past, as a host's
// are: a scan of fresh ones is not kept (see racyWindow).
func ageDirs(t *testing.T, host string) {
	t.Helper()
	old := time.Now().Add(-time.Hour)
	for _, p := range stampPaths(host) {
		if st, err := os.Lstat(p); err == nil && st.IsDir() {
			if err := os.Chtimes(p, old, old); err != nil {
				t.Fatal(err)
			}
		}
	}
	// ctime cannot be set: wait until the fresh ones are old enough.
	time.Sleep(racyWindow + 100*time.Millisecond)
}

func TestHostViewAlternatives(t *testing.T) {
	host := fakeDebian(t)
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	want := "awk=/usr/bin/mawk java=/usr/lib/jvm/bin/java mta=/usr/sbin/exim4 nawk=/usr/bin/mawk pager=/usr/bin/less"
	if got := alternativesOf(t, entries); got != want {
		t.Fatalf("alternatives = %q, want %q", got, want)
	}
	for _, e := range entries {
		if strings.Contains(e.Target, "shadow") || strings.Contains(e.Target, "/opt/") {
			t.Errorf("%+v leads out of the view", e)
		}
	}

	// No alternatives directory: none, and no /etc/alternatives.
	bare := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bare, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/alternatives/awk", filepath.Join(bare, "usr/bin/awk")); err != nil {
		t.Fatal(err)
	}
	entries, err = HostView(bare, "box")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Path, AlternativesDir) {
			t.Errorf("%+v on a host without alternatives", e)
		}
	}
}

// TestHostViewAlternativesManyNames: a bin directory far larger than one
// read of its entries (getdents batches) still has every link found, and
// a long link name or target is read whole.
func TestHostViewAlternativesManyNames(t *testing.T) {
	host := fakeDebian(t)
	var want []string
	long := strings.Repeat("n", 200)
	for i := 0; i < 3000; i++ {
		name := fmt.Sprintf("%s-%04d", long[:40], i)
		target := "/usr/bin/real-" + name
		if i%100 == 0 {
			target = "/etc/alternatives/" + name
			if err := os.Symlink("/usr/bin/"+long+"-target", filepath.Join(host, "etc/alternatives", name)); err != nil {
				t.Fatal(err)
			}
			want = append(want, name+"=/usr/bin/"+long+"-target")
		}
		if err := os.Symlink(target, filepath.Join(host, "usr/bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	got := alternativesOf(t, entries)
	for _, w := range want {
		if !strings.Contains(" "+got+" ", " "+w+" ") {
			t.Fatalf("alternative %s missing from %d found", w[:45], strings.Count(got, "="))
		}
	}
	if n := strings.Count(got, "="); n != len(want)+5 {
		t.Fatalf("%d alternatives, want %d", n, len(want)+5)
	}
}

func TestHostViewAlternativesBound(t *testing.T) {
	host := t.TempDir()
	for _, d := range []string{"usr/bin", "etc/alternatives"} {
		if err := os.MkdirAll(filepath.Join(host, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < MaxAlternatives+20; i++ {
		n := fmt.Sprintf("p%04d", i)
		if err := os.Symlink("/etc/alternatives/"+n, filepath.Join(host, "usr/bin", n)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/usr/bin/real", filepath.Join(host, "etc/alternatives", n)); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := HostView(host, "box")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(entries); err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(alternativesOf(t, entries))); n != MaxAlternatives {
		t.Fatalf("%d alternatives, want %d", n, MaxAlternatives)
	}
}

// The scan is kept while the directories it read are unchanged, and done
// again when a link changes.
func TestHostViewAlternativesCache(t *testing.T) {
	host := fakeDebian(t)
	ageDirs(t, host)
	plan := func() string {
		t.Helper()
		entries, err := HostView(host, "box")
		if err != nil {
			t.Fatal(err)
		}
		return alternativesOf(t, entries)
	}
	first := plan()
	scans := altScans.Load()
	for i := 0; i < 3; i++ {
		if got := plan(); got != first {
			t.Fatalf("cached plan %q, want %q", got, first)
		}
	}
	if n := altScans.Load() - scans; n != 0 {
		t.Fatalf("%d scans of an unchanged host, want 0", n)
	}

	// update-alternatives: a new link renamed over the old one.
	link := filepath.Join(host, "etc/alternatives/awk")
	if err := os.Symlink("/usr/bin/gawk", link+".new"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(link+".new", link); err != nil {
		t.Fatal(err)
	}
	if got := " " + plan(); !strings.Contains(got, " awk=/usr/bin/gawk") || strings.Contains(got, " awk=/usr/bin/mawk") {
		t.Fatalf("after the link changed: %q", got)
	}
	// A new name in a bin directory.
	if err := os.Symlink("/etc/alternatives/unused", filepath.Join(host, "usr/bin/unused")); err != nil {
		t.Fatal(err)
	}
	if got := plan(); !strings.Contains(got, "unused=/usr/bin/unused") {
		t.Fatalf("after a name was added: %q", got)
	}
	// A link removed.
	if err := os.Remove(filepath.Join(host, "etc/alternatives/pager")); err != nil {
		t.Fatal(err)
	}
	if got := plan(); strings.Contains(got, "pager=") {
		t.Fatalf("after a link was removed: %q", got)
	}
	if altScans.Load()-scans < 3 {
		t.Fatal("changes were not scanned")
	}
}

// Plans of one root made at once share one scan (a runtime's
// WarmHostView and its first create, say): the others wait for it. The
// bin directory is large enough that the scan takes a while.
func TestHostViewAlternativesScannedOnceAtATime(t *testing.T) {
	host := fakeDebian(t)
	for i := 0; i < 3000; i++ {
		if err := os.Symlink("/etc/alternatives/awk", filepath.Join(host, "usr/bin", fmt.Sprint("awk", i))); err != nil {
			t.Fatal(err)
		}
	}
	ageDirs(t, host)
	scans := altScans.Load()
	const n = 8
	got := make([]string, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i == 0 {
				WarmHostView(host)
			}
			entries, err := HostView(host, "box")
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = alternativesOf(t, entries)
		}()
	}
	close(start)
	wg.Wait()
	if d := altScans.Load() - scans; d != 1 {
		t.Fatalf("%d scans for %d plans at once, want 1", d, n)
	}
	for i := range got {
		if got[i] != got[0] || !strings.Contains(got[i], "awk=/usr/bin/mawk") {
			t.Fatalf("plan %d: %q, plan 0: %q", i, got[i], got[0])
		}
	}
}

func TestCheckAlternatives(t *testing.T) {
	etc := []Entry{{Path: "/etc", Kind: KindDir}, {Path: "/etc/passwd", Kind: KindFile}}
	alt := Entry{Path: AlternativesDir, Kind: KindDir}
	good := append(append([]Entry{}, etc...), alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/usr/bin/mawk"})
	if err := Check(good); err != nil {
		t.Fatal(err)
	}
	bad := [][]Entry{
		{{Path: "/usr/x", Kind: KindDir}},
		{{Path: "/usr/bin/x", Kind: KindSymlink, Target: "/x"}},
		{{Path: "/etc/passwd", Kind: KindFile}},                                                  // no /etc
		{{Path: "/etc", Kind: KindBindDir, Source: "/x"}, {Path: "/etc/passwd", Kind: KindFile}}, // not ours
		append(etc[:1:1], Entry{Path: "/etc/x", Kind: KindDir}),
		append(etc[:1:1], Entry{Path: "/etc/x", Kind: KindSymlink, Target: "/usr/bin/x"}),
		append(etc[:1:1], Entry{Path: "/etc/x", Kind: KindBindFile, Source: "/etc/shadow"}),
		append(etc[:1:1], Entry{Path: "/etc/x/y", Kind: KindFile}),
		append(etc[:1:1], Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/usr/bin/mawk"}), // no directory
		{alt, {Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/usr/bin/mawk"}},                  // no /etc
		append(etc[:1:1], alt, alt),
		append(etc[:1:1], Entry{Path: "/etc", Kind: KindDir}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindFile}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/etc/shadow"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "mawk"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/usr/../etc/shadow"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/usr"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/awk", Kind: KindSymlink, Target: "/opt/x"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/a/b", Kind: KindSymlink, Target: "/usr/bin/x"}),
		append(etc[:1:1], alt, Entry{Path: "/etc/alternatives/x", Kind: KindDir}),
	}
	for _, es := range bad {
		if err := Check(es); err == nil {
			t.Errorf("Check(%+v) accepted", es)
		}
	}
	many := append(append([]Entry{}, etc...), alt)
	for i := 0; i <= MaxAlternatives; i++ {
		many = append(many, Entry{Path: fmt.Sprintf("/etc/alternatives/p%d", i), Kind: KindSymlink, Target: "/usr/bin/x"})
	}
	if err := Check(many); err == nil {
		t.Error("more than MaxAlternatives links accepted")
	}
}

// BenchmarkHostView is the view's cost per sandbox create (seal.New), with
// the alternatives scan cached.
func BenchmarkHostView(b *testing.B) {
	if _, err := HostView("/", "box"); err != nil {
		b.Skip(err)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := HostView("/", "box"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAlternatives is the alternatives' share of it: the cache's
// revalidation (five lstats).
func BenchmarkAlternatives(b *testing.B) {
	alternatives("/")
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		alternatives("/")
	}
}

// BenchmarkAlternativesScan is what the cache saves: a scan of the host's
// bin directories and alternatives.
func BenchmarkAlternativesScan(b *testing.B) {
	paths := stampPaths("/")
	stamps := make([]stamp, len(paths))
	for i, p := range paths {
		stamps[i] = takeStamp(p)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		scanAlternatives("/", stamps)
	}
}
