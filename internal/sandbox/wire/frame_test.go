package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func framed(t *testing.T, payload []byte) []byte {
	t.Helper()
	b, err := io.ReadAll(NewFramer(bytes.NewReader(payload)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestFraming(t *testing.T) {
	for _, size := range []int{0, 1, frameSize - 1, frameSize, 3*frameSize + 17} {
		payload := bytes.Repeat([]byte("x"), size)
		for _, read := range []func(io.Reader) io.Reader{
			func(r io.Reader) io.Reader { return r },
			iotest.OneByteReader,
			iotest.HalfReader,
		} {
			got, err := io.ReadAll(NewUnframer(read(bytes.NewReader(framed(t, payload)))))
			if err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("size %d: got %d bytes, %v", size, len(got), err)
			}
		}
	}
	// Every cut of a framed stream short of its end is incomplete.
	whole := framed(t, bytes.Repeat([]byte("abc"), frameSize))
	for _, cut := range []int{0, 3, 4, 5, frameSize, len(whole) - 4, len(whole) - 1} {
		_, err := io.ReadAll(NewUnframer(bytes.NewReader(whole[:cut])))
		if !errors.Is(err, ErrIncomplete) {
			t.Errorf("cut at %d of %d: %v, want ErrIncomplete", cut, len(whole), err)
		}
	}
	// A source that fails yields no end mark.
	src := io.MultiReader(strings.NewReader("partial"), iotest.ErrReader(errors.New("client went away")))
	var stream bytes.Buffer
	if _, err := io.Copy(&stream, NewFramer(src)); err == nil || !strings.Contains(err.Error(), "went away") {
		t.Fatalf("framer over a failing source: %v", err)
	}
	if _, err := io.ReadAll(NewUnframer(&stream)); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("what the framer sent before the failure: %v, want ErrIncomplete", err)
	}
	// An absurd frame length is refused, not allocated.
	if _, err := io.ReadAll(NewUnframer(bytes.NewReader([]byte{0xff, 0xff, 0xff, 0xff}))); err == nil || errors.Is(err, ErrIncomplete) {
		t.Fatalf("huge frame: %v", err)
	}
}
