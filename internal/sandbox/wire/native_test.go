package wire

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// TestRecvPassesStderrOn: with Stderr set, what the peer writes to the
// socket as its standard error (raw text, a write a packet) is handed over
// in order and Recv goes on to the next message; a malformed message is
// still an error, and without Stderr text is too.
func TestRecvPassesStderrOn(t *testing.T) {
	parent, childEnd, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer parent.Close()
	defer childEnd.Close()
	var text []string
	parent.Stderr = func(b []byte) { text = append(text, string(b)) }
	write := func(s string) {
		t.Helper()
		if _, err := childEnd.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write("ironclaw: ")
	write("{not json\n")
	write(strings.Repeat("y", MaxPacket+10)) // longer than a message may be
	write(`{"op":"ready","id":9}`)
	write(`{"op":"exited","id":"ten"}`) // JSON, but not a Reply
	write("last words\n")

	var rep Reply
	if files, err := parent.Recv(&rep); err != nil || len(files) != 0 || rep.Op != OpReady || rep.ID != 9 {
		t.Fatalf("Recv: %+v, %v, %v", rep, files, err)
	}
	if len(text) != 3 || text[0] != "ironclaw: " || text[1] != "{not json\n" || len(text[2]) != MaxPacket {
		t.Fatalf("stderr before the message: %d pieces %q", len(text), text[:min(len(text), 2)])
	}
	var bad Reply
	if _, err := parent.Recv(&bad); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Fatalf("Recv of JSON that is no Reply: %+v, %v", bad, err)
	}
	childEnd.Close()
	if _, err := parent.Recv(&rep); err == nil || len(text) != 4 || text[3] != "last words\n" {
		t.Fatalf("Recv at the end: %v, text %q", err, text[3:])
	}

	plain, plainChild, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	defer plainChild.Close()
	if _, err := plainChild.Write([]byte("text")); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Recv(&rep); err == nil {
		t.Fatal("a Conn without Stderr took text for a message")
	}
}

func TestPacketRoomHoldsMaxFDs(t *testing.T) {
	if got, want := len(packet{}.oob), unix.CmsgSpace(4*maxFDs); got != want {
		t.Fatalf("oobSpace is %d, want unix.CmsgSpace(4*maxFDs) = %d", got, want)
	}
}

// TestWaitingConnsHoldNoPacket: a Conn blocked in Recv holds no message
// buffer (a daemon holds one Conn per idle sandbox), and each still
// receives once its peer writes.
func TestWaitingConnsHoldNoPacket(t *testing.T) {
	const n = 200
	type pair struct {
		parent *Conn
		child  *os.File
	}
	heapInUse := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse)
	}
	before := heapInUse()
	pairs := make([]pair, n)
	for i := range pairs {
		p, c, err := Pair()
		if err != nil {
			t.Fatal(err)
		}
		pairs[i] = pair{p, c}
		defer p.Close()
		defer c.Close()
	}
	type received struct {
		id  uint64
		err error
	}
	got := make(chan received, n) // never blocks a Recv ended by the deferred closes
	for _, p := range pairs {
		go func(c *Conn) {
			var r Reply
			_, err := c.Recv(&r)
			got <- received{r.ID, err}
		}(p.parent)
	}
	time.Sleep(200 * time.Millisecond) // every Recv is waiting
	// Each waiting Conn costs a stack, its sockets and a poll descriptor;
	// a packet (MaxPacket bytes) each would be 25 MiB here.
	if grown := heapInUse() - before; grown > n*16<<10 {
		t.Fatalf("%d waiting Conns grew the heap by %d bytes (%d each): they hold their buffers", n, grown, grown/n)
	}
	for i, p := range pairs {
		if _, err := p.child.Write(fmt.Appendf(nil, `{"op":"ready","id":%d}`, i+1)); err != nil {
			t.Fatal(err)
		}
	}
	sum := uint64(0)
	for range pairs {
		r := <-got
		if r.err != nil {
			t.Fatal(r.err)
		}
		sum += r.id
	}
	if sum != n*(n+1)/2 {
		t.Fatalf("the waiting Conns received ids summing to %d, want %d", sum, n*(n+1)/2)
	}
}

// TestRecvWaitEnds: a deadline ends a waiting Recv with
// os.ErrDeadlineExceeded and Close ends one with net.ErrClosed; a packet
// longer than a message is refused, not cut.
func TestRecvWaitEnds(t *testing.T) {
	parent, childEnd, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer childEnd.Close()
	var r Reply
	parent.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := parent.Recv(&r); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Recv past its deadline: %v", err)
	}
	parent.SetReadDeadline(time.Time{})
	if _, err := childEnd.Write([]byte(`{"op":"ready","id":1,"err":"` + strings.Repeat("x", MaxPacket) + `"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Recv(&r); err == nil || !strings.Contains(err.Error(), "truncated") || r.Op != "" {
		t.Fatalf("Recv of an oversized packet: %+v, %v", r, err)
	}
	done := make(chan error, 1)
	go func() { _, err := parent.Recv(&r); done <- err }()
	time.Sleep(20 * time.Millisecond)
	parent.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Recv ended by Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end a waiting Recv")
	}
}
