package wire

import (
	"io"
	"os"
	"strings"
	"testing"
)

func TestRoundTripWithDescriptors(t *testing.T) {
	parent, childEnd, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	child, err := NewConn(childEnd)
	if err != nil {
		t.Fatal(err)
	}
	defer child.Close()

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	req := Request{Op: OpExec, ID: 7, Argv: []string{"echo", "hi"}, Env: []string{"A=1"}, Dir: "/workspace"}
	if err := parent.Send(req, r); err != nil {
		t.Fatal(err)
	}
	r.Close() // the child holds its own copy now
	var got Request
	files, err := child.Recv(&got)
	if err != nil {
		t.Fatal(err)
	}
	if got.Op != OpExec || got.ID != 7 || strings.Join(got.Argv, " ") != "echo hi" || got.Dir != "/workspace" {
		t.Fatalf("got %+v", got)
	}
	if len(files) != 1 {
		t.Fatalf("%d descriptors, want 1", len(files))
	}
	defer CloseAll(files)
	if _, err := w.Write([]byte("through")); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, err := io.ReadAll(files[0])
	if err != nil || string(b) != "through" {
		t.Fatalf("passed pipe read %q, %v", b, err)
	}
}

func TestOversizedMessageRefused(t *testing.T) {
	parent, childEnd, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	childEnd.Close()
	big := Request{Op: OpExec, Argv: []string{strings.Repeat("x", MaxPacket)}}
	if err := parent.Send(big); err == nil || !strings.Contains(err.Error(), "limit") {
		t.Fatalf("Send of an oversized message: %v", err)
	}
}

func TestRecvAfterPeerCloses(t *testing.T) {
	parent, childEnd, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	childEnd.Close()
	var r Reply
	if _, err := parent.Recv(&r); err == nil {
		t.Fatal("Recv succeeded on a closed pair")
	}
}
