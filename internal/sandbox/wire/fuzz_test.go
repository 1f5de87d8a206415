package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzReply is the daemon reading what a sandbox's pid 1 sends: any packet
// (the init is inside the sandbox and may be subverted), with up to 69
// descriptors beside it (and, with pad, that packet followed by spaces to
// one byte over MaxPacket: still JSON, but too long; small inputs keep
// the fuzzer fast). Whatever arrives, Recv does not panic, and:
//
//   - it refuses a packet over MaxPacket, one with more than maxFDs
//     descriptors, an empty one (the peer's close) and one that is not a
//     Reply's JSON, with a "wire: " error and no descriptor kept open;
//   - what it accepts comes with every descriptor sent, and is a Reply
//     that the daemon's own Send carries through unchanged (so nothing in
//     a reply depends on how the init spelled it).
func FuzzReply(f *testing.F) {
	for _, s := range []struct {
		pkt string
		fds uint8
		pad bool
	}{
		{`{"op":"ready","id":0}`, 2, false},
		{`{"op":"started","id":7,"pid":12}`, 1, false},
		{`{"op":"exited","id":7,"status":256}`, 0, false},
		{`{"op":"failed","id":3,"code":"not-found","errno":2,"err":"no such file"}`, 0, false},
		{`{"op":"done","id":9,"size":1048576}`, 0, false},
		{`{"OP":"done","Id":9,"op":"failed"}`, 0, false},
		{`{"op":"done","id":-1}`, 0, false},
		{`{"op":"done","id":18446744073709551616}`, 0, false},
		{`{"op":"done","id":1,"status":1e400}`, 0, false},
		{`{"op":"done"}{"op":"failed"}`, 0, false},
		{`[]`, 0, false},
		{``, 1, false},
		{`{"op":"ready"}`, 65, false},
		{`{"op":"x","err":"\u001b[2J\ud800"}`, 0, false},
		{`{"op":"ready","id":1}`, 0, true},
	} {
		f.Add([]byte(s.pkt), s.fds, s.pad)
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		f.Fatal(err)
	}
	defer devnull.Close()

	f.Fuzz(func(t *testing.T, pkt []byte, nfds uint8, pad bool) {
		if pad && len(pkt) <= MaxPacket {
			pkt = append(pkt, bytes.Repeat([]byte(" "), MaxPacket+1-len(pkt))...)
		}
		parent, childEnd, err := Pair()
		if err != nil {
			t.Fatal(err)
		}
		defer parent.Close()
		parent.NonblockFDs = true // as the daemon's side
		child, err := NewConn(childEnd)
		if err != nil {
			t.Fatal(err)
		}
		defer child.Close()

		n := int(nfds) % 70
		var oob []byte
		if n > 0 {
			fds := make([]int, n)
			for i := range fds {
				fds[i] = int(devnull.Fd())
			}
			oob = unix.UnixRights(fds...)
		}
		before := openFDs(t)
		if _, _, err := child.c.WriteMsgUnix(pkt, oob, nil); err != nil {
			if errors.Is(err, unix.EMSGSIZE) || errors.Is(err, unix.ENOBUFS) {
				return // the kernel refuses it: no init can send this
			}
			t.Fatalf("sending %d bytes and %d descriptors: %v", len(pkt), n, err)
		}
		var rep Reply
		files, err := parent.Recv(&rep)
		if err != nil {
			if files != nil {
				t.Fatalf("Recv failed (%v) and returned %d descriptors", err, len(files))
			}
			if !strings.HasPrefix(err.Error(), "wire: ") {
				t.Fatalf("Recv's error %q does not say it is the wire's", err)
			}
			if after := openFDs(t); after != before {
				t.Fatalf("Recv failed (%v) and left %d descriptors open (before %d)", err, after, before)
			}
			return
		}
		defer CloseAll(files)
		switch {
		case len(pkt) > MaxPacket:
			t.Fatalf("accepted a %d-byte packet over MaxPacket", len(pkt))
		case n > maxFDs:
			t.Fatalf("accepted %d descriptors over maxFDs", n)
		case len(files) != n:
			t.Fatalf("sent %d descriptors, received %d", n, len(files))
		case !json.Valid(pkt):
			t.Fatalf("accepted a packet that is not JSON: %q", pkt)
		}
		for _, f := range files {
			if fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
				t.Fatalf("a received descriptor is not close-on-exec (flags %#x, %v)", fl, err)
			}
		}
		// The daemon's own encoding of what it read reads back the same.
		if err := child.Send(rep); err != nil {
			t.Fatalf("re-sending %+v: %v", rep, err)
		}
		var again Reply
		more, err := parent.Recv(&again)
		CloseAll(more)
		if err != nil || !reflect.DeepEqual(again, rep) {
			t.Fatalf("%q read as %+v, which reads back as %+v (%v)", pkt, rep, again, err)
		}
	})
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
