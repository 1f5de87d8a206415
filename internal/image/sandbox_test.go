package image_test

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/ironclaw/ironclaw/internal/image"
	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/sandboxtest"
)

// The test binary is also the sandbox init (the native runtime re-executes
// /proc/self/exe) and the static program the end-to-end image holds.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.Env("IRONCLAW_IMAGE_HELLO", hello))
}

// hello runs inside the sandbox, from the image.
func hello() int {
	b, err := os.ReadFile("/etc/greeting")
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	_, hostSh := os.Stat("/usr/bin/sh")
	fmt.Printf("hello from the image: %s; host /usr/bin/sh visible: %v; uid %d\n", strings.TrimSpace(string(b)), hostSh == nil, os.Getuid())
	return 0
}

// TestRunInSandbox resolves an image holding a static binary and runs it
// with the native runtime, the image's root as the sandbox's root.
func TestRunInSandbox(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the native runtime binds the image root with the daemon's rights")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	layerTar := filepath.Join(t.TempDir(), "layer.tar")
	writeExeLayer(t, exe, layerTar)
	l, err := tarball.LayerFromFile(layerTar, tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newStore(t, image.Options{})
	img := resolve(t, s, writeLayout(t, []v1.Image{imageOf(t, l)}))

	box := sandboxtest.New(t, sandboxtest.Native(t), sandbox.Spec{Root: sandbox.Root{Kind: sandbox.RootDirectory, Path: img.RootDir}})
	o := box.Exec(sandbox.ExecRequest{Argv: []string{"/bin/hello"}, Env: []string{"IRONCLAW_IMAGE_HELLO=1"}})
	if o.Err != nil || o.Res.ExitCode != 0 {
		t.Fatalf("exec: %v, exit %d, stdout %q, stderr %q", o.Err, o.Res.ExitCode, o.Stdout, o.Stderr)
	}
	want := fmt.Sprintf("hello from the image: ahoy; host /usr/bin/sh visible: false; uid %d\n", sandbox.UID)
	if o.Stdout != want {
		t.Fatalf("stdout %q, want %q", o.Stdout, want)
	}
}

// writeExeLayer writes a layer holding exe as /bin/hello and a greeting.
func writeExeLayer(t testing.TB, exe, dst string) {
	t.Helper()
	in, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	writeEnts(t, tw, dir("bin/"), dir("etc/"), reg("etc/greeting", "ahoy\n"))
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/hello", Mode: 0o755, Size: st.Size(), ModTime: testTime}); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(tw, in); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
