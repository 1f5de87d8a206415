package engine

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// The streams of a multiplexed stream's frames.
const (
	streamStdin  = 0 // dockerd writes it as stdout
	streamStdout = 1
	streamStderr = 2
	streamSystem = 3 // an error of the daemon's, ending the stream
)

// frameHeaderLen is a frame header's size: the stream, three zero bytes
// and the payload's length, big-endian.
const frameHeaderLen = 8

// ErrTruncatedFrame: a multiplexed stream ended inside a frame.
var ErrTruncatedFrame = errors.New("multiplexed stream: truncated frame")

// Demux copies a multiplexed stream (a container's logs, a non-TTY exec's
// output) from r: each frame's payload to stdout or stderr (nil: dropped).
// It returns the bytes copied and nil at the end of r on a frame boundary;
// a stream ending inside a frame, an unknown stream, a write error or a
// daemon system-error frame is an error. Whatever length a header claims,
// frames are copied through a fixed buffer: a hostile length costs time
// to stream, never memory.
func Demux(stdout, stderr io.Writer, r io.Reader) (int64, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	var hdr [frameHeaderLen]byte
	var total int64
	// One copy buffer and one payload reader for the whole stream, not one
	// per frame.
	var buf []byte
	payload := &io.LimitedReader{R: r}
	for {
		if n, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return total, nil
			}
			if err == io.ErrUnexpectedEOF {
				return total, fmt.Errorf("%w: %d of %d header bytes", ErrTruncatedFrame, n, frameHeaderLen)
			}
			return total, err
		}
		size := int64(binary.BigEndian.Uint32(hdr[4:]))
		var dst io.Writer
		switch hdr[0] {
		case streamStdin, streamStdout:
			dst = stdout
		case streamStderr:
			dst = stderr
		case streamSystem:
			msg, err := io.ReadAll(io.LimitReader(r, min(size, MaxErrorBody)))
			if err != nil {
				return total, err
			}
			return total, fmt.Errorf("error from the Docker daemon: %s", msg)
		default:
			return total, fmt.Errorf("multiplexed stream: unknown stream %d", hdr[0])
		}
		if buf == nil {
			buf = make([]byte, 32<<10)
		}
		payload.N = size
		n, err := io.CopyBuffer(dst, payload, buf)
		total += n
		if err != nil {
			return total, err
		}
		if n < size {
			return total, fmt.Errorf("%w: %d of %d payload bytes", ErrTruncatedFrame, n, size)
		}
	}
}

// Hijacked is an exec's attached stream: the connection dockerd took over
// from HTTP. Writes go to the process's stdin; Output copies what it
// writes. Close may be called at any time, from any goroutine, to end the
// stream.
type Hijacked struct {
	conn net.Conn
	r    *bufio.Reader // the connection's reader, holding what came with the reply
	tty  bool
}

// Write sends p to the process's stdin.
func (h *Hijacked) Write(p []byte) (int, error) { return h.conn.Write(p) }

// CloseWrite half-closes the connection: the process reads end of file on
// its stdin, and its output still arrives.
func (h *Hijacked) CloseWrite() error {
	if cw, ok := h.conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("the daemon connection cannot be half-closed")
}

// Close ends the stream both ways.
func (h *Hijacked) Close() error { return h.conn.Close() }

// Output copies the process's output until it ends: demultiplexed to
// stdout and stderr, or for a TTY exec, raw to stdout.
func (h *Hijacked) Output(stdout, stderr io.Writer) (int64, error) {
	if h.tty {
		if stdout == nil {
			stdout = io.Discard
		}
		return io.Copy(stdout, h.r)
	}
	return Demux(stdout, stderr, h.r)
}
