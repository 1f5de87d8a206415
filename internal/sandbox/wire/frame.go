package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// An upload (Sandbox.WriteFile) travels framed from the daemon to pid 1
// or the helper: the daemon's side cannot say "that was everything" by
// closing its stream, since a cut-short stream ends the same way, so the
// data comes in chunks with a length, then an end mark that only a
// complete upload carries (NewFramer, NewUnframer). Pid 1 replaces the
// file only once the end mark has arrived (package inside/files), writing
// to a temporary file named UploadTempPrefix... in the target's directory
// until then.

// ErrIncomplete: the upload's stream ended before its end mark; nothing
// was changed.
var ErrIncomplete = errors.New("the upload ended before all of it arrived; the file was left as it was")

// UploadTempPrefix starts the name of every temporary file a write makes
// in the target's directory; it is renamed or removed before the write
// returns.
const UploadTempPrefix = ".ironclaw-upload-"

// frameMax bounds one frame of an upload.
const frameMax = 1 << 20

// frameSize is the payload of the frames NewFramer makes.
const frameSize = 64 << 10

// NewFramer returns the framed form of src for NewUnframer: 4-byte
// big-endian lengths, each followed by that many bytes, and a zero length
// (the end mark) once src has returned io.EOF. If src fails, the framer
// returns its error and no end mark, so the stream ends incomplete.
func NewFramer(src io.Reader) io.Reader {
	return &framer{src: src, buf: make([]byte, 4+frameSize)}
}

type framer struct {
	src     io.Reader
	buf     []byte
	pending []byte
	ended   bool // the end mark is in pending or sent
	err     error
}

func (f *framer) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.ended {
			return 0, io.EOF
		}
		if f.err != nil {
			return 0, f.err
		}
		n, err := io.ReadAtLeast(f.src, f.buf[4:], 1)
		if n > 0 {
			binary.BigEndian.PutUint32(f.buf, uint32(n))
			f.pending = f.buf[:4+n]
		}
		switch {
		case err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF):
			f.pending = append(f.pending, 0, 0, 0, 0)
			f.ended = true
		case err != nil:
			// What was read comes with no end mark: the unframer
			// discards the upload.
			f.err = err
			f.pending = nil
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

// NewUnframer returns the payload of a framed stream from NewFramer. It
// returns io.EOF after the end mark, and ErrIncomplete if r ends (or
// fails) before it.
func NewUnframer(r io.Reader) io.Reader { return &unframer{r: r} }

type unframer struct {
	r    io.Reader
	left uint32 // bytes of the current frame still to read
	hdr  [4]byte
	done bool
	err  error
}

func (u *unframer) Read(p []byte) (int, error) {
	for u.left == 0 {
		if u.done {
			return 0, io.EOF
		}
		if u.err != nil {
			return 0, u.err
		}
		if _, err := io.ReadFull(u.r, u.hdr[:]); err != nil {
			u.err = u.incomplete(err)
			return 0, u.err
		}
		n := binary.BigEndian.Uint32(u.hdr[:])
		if n == 0 {
			u.done = true
			return 0, io.EOF
		}
		if n > frameMax {
			u.err = fmt.Errorf("upload: a frame of %d bytes is over the %d-byte limit", n, frameMax)
			return 0, u.err
		}
		u.left = n
	}
	if uint32(len(p)) > u.left {
		p = p[:u.left]
	}
	n, err := u.r.Read(p)
	u.left -= uint32(n)
	if err != nil && (u.left > 0 || err != io.EOF) {
		u.err = u.incomplete(err)
		if n > 0 {
			return n, nil
		}
		return 0, u.err
	}
	return n, nil
}

func (u *unframer) incomplete(err error) error {
	if err == io.EOF || errors.Is(err, io.ErrUnexpectedEOF) {
		return ErrIncomplete
	}
	return fmt.Errorf("%w: %v", ErrIncomplete, err)
}
