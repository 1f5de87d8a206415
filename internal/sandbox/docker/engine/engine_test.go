package engine

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fakeDaemon serves h on a unix socket, as dockerd does, and returns a
// client of it (pinged when the handler answers /_ping).
func fakeDaemon(t *testing.T, h http.HandlerFunc) *Client {
	t.Helper()
	// A short directory: a socket path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "eng")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := New("unix://" + sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestNewRejectsNonUnixHosts(t *testing.T) {
	for _, h := range []string{"tcp://127.0.0.1:2375", "unix://", "npipe:////./pipe/docker_engine", "::bad"} {
		if _, err := New(h); err == nil {
			t.Errorf("New(%q) accepted", h)
		}
	}
	if c, err := New(""); err != nil || c.sock != "/var/run/docker.sock" {
		t.Errorf(`New("") = %+v, %v; want the default socket`, c, err)
	}
}

// Ping takes the daemon's version, capped at MaxVersion, and refuses one
// below MinVersion; later requests carry the version in their path.
func TestPingNegotiates(t *testing.T) {
	for _, tc := range []struct {
		announced, want string
		refused         bool
	}{
		{"1.41", "1.41", false},
		{"1.45", "1.45", false},
		{"1.56", "1.56", false},
		{"1.99", MaxVersion, false},
		{"2.0", MaxVersion, false},
		{"1.40", "", true},
		{"1.12", "", true},
		{"", "", true},
		{"v1.45", "", true},
		{"one.two", "", true},
	} {
		t.Run(tc.announced, func(t *testing.T) {
			var got string
			c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/_ping" {
					if tc.announced != "" {
						w.Header().Set("Api-Version", tc.announced)
					}
					io.WriteString(w, "OK")
					return
				}
				got = r.URL.Path
				io.WriteString(w, `{"ServerVersion":"x"}`)
			})
			err := c.Ping(ctxT(t))
			if tc.refused {
				if !errors.Is(err, ErrUnsupportedVersion) {
					t.Fatalf("Ping with API %q = %v, want ErrUnsupportedVersion", tc.announced, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.Info(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if want := "/v" + tc.want + "/info"; got != want {
				t.Errorf("after Ping with API %s, Info went to %s, want %s", tc.announced, got, want)
			}
		})
	}
}

// Every status of 400 or more is an *Error, classified by errors.Is, with
// the daemon's message in the moby client's words.
func TestErrorMapping(t *testing.T) {
	for _, tc := range []struct {
		status   int
		ctype    string
		body     string
		class    error
		wantText string
	}{
		{404, "application/json", `{"message":"No such container: abc"}`, ErrNotFound, "Error response from daemon: No such container: abc"},
		{409, "application/json", `{"message":"Container abc is already paused"}` + "\n", ErrConflict, "Error response from daemon: Container abc is already paused"},
		{400, "application/json", `{"message":"invalid mount config"}`, ErrInvalidArgument, "Error response from daemon: invalid mount config"},
		{500, "application/json", `{"message":"OCI runtime create failed: fork: resource temporarily unavailable"}`, ErrInternal,
			"Error response from daemon: OCI runtime create failed: fork: resource temporarily unavailable"},
		{503, "text/plain", "  daemon shutting down \n", ErrInternal, "Error response from daemon: daemon shutting down"},
		{403, "application/json", `{"msg":"not the right field"}`, ErrInvalidArgument, `Error response from daemon: {"msg":"not the right field"}`},
		{404, "text/plain", "", ErrNotFound, "Error response from daemon: 404 Not Found with no message"},
	} {
		c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tc.ctype)
			w.WriteHeader(tc.status)
			io.WriteString(w, tc.body)
		})
		_, err := c.ContainerInspect(ctxT(t), "abc")
		var e *Error
		if !errors.As(err, &e) || e.Status != tc.status {
			t.Errorf("%d: err = %v, want an *Error with status %d", tc.status, err, tc.status)
			continue
		}
		if !errors.Is(err, tc.class) {
			t.Errorf("%d: %v is not %v", tc.status, err, tc.class)
		}
		for _, other := range []error{ErrNotFound, ErrConflict, ErrInvalidArgument, ErrInternal} {
			if other != tc.class && errors.Is(err, other) {
				t.Errorf("%d: %v is also %v", tc.status, err, other)
			}
		}
		if err.Error() != tc.wantText {
			t.Errorf("%d: text %q, want %q", tc.status, err.Error(), tc.wantText)
		}
	}
	// The classification survives the backend's wrapping.
	wrapped := fmt.Errorf("sandbox x: stats: %w", &Error{Status: 404, Message: "gone"})
	if !errors.Is(wrapped, ErrNotFound) {
		t.Errorf("a wrapped 404 is not ErrNotFound")
	}
	// ImageExists turns a 404 into false, anything else into an error.
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/images/ironclaw/empty:1/json") {
			w.WriteHeader(404)
			io.WriteString(w, `{"message":"No such image: ironclaw/empty:1"}`)
			return
		}
		w.WriteHeader(500)
	})
	if ok, err := c.ImageExists(ctxT(t), "ironclaw/empty:1"); ok || err != nil {
		t.Errorf("ImageExists(missing) = %v, %v; want false, nil", ok, err)
	}
	if ok, err := c.ImageExists(ctxT(t), "other:1"); ok || !errors.Is(err, ErrInternal) {
		t.Errorf("ImageExists(500) = %v, %v; want an ErrInternal", ok, err)
	}
}

// endless writes chunk until the client hangs up (or 1 GiB went out),
// and reports how much it wrote.
func endless(w io.Writer, chunk []byte) int64 {
	var n int64
	for n < 1<<30 {
		k, err := w.Write(chunk)
		n += int64(k)
		if err != nil {
			break
		}
	}
	return n
}

// A hostile daemon's endless error body or reply is cut at its bound: the
// client neither waits for its end nor holds it in memory.
func TestHostileRepliesAreBounded(t *testing.T) {
	chunk := bytes.Repeat([]byte("A"), 64<<10)
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/containers/err/json"):
			w.WriteHeader(500)
			endless(w, chunk)
		case strings.HasSuffix(r.URL.Path, "/containers/big/json"):
			io.WriteString(w, `{"Id":"`)
			endless(w, chunk)
		case strings.HasSuffix(r.URL.Path, "/images/create"):
			for {
				if _, err := io.WriteString(w, `{"status":"importing"}`+"\n"); err != nil {
					return
				}
			}
		}
	})
	_, err := c.ContainerInspect(ctxT(t), "err")
	var e *Error
	if !errors.As(err, &e) || !errors.Is(err, ErrInternal) {
		t.Fatalf("endless error body: %v", err)
	}
	if len(e.Message) > MaxErrorBody+64 || !strings.Contains(e.Message, "cut at") {
		t.Errorf("endless error body gave a %d-byte message (bound %d), ending %q", len(e.Message), MaxErrorBody, e.Message[max(0, len(e.Message)-60):])
	}
	if _, err := c.ContainerInspect(ctxT(t), "big"); !errors.Is(err, ErrReplyTooLarge) {
		t.Errorf("endless inspect reply: %v, want ErrReplyTooLarge", err)
	}
	if err := c.ImageImport(ctxT(t), strings.NewReader("tar"), "ironclaw/root:1", ""); !errors.Is(err, ErrReplyTooLarge) {
		t.Errorf("endless import messages: %v, want ErrReplyTooLarge", err)
	}
}

// frame is one frame of a multiplexed stream.
func frame(stream byte, payload string) []byte {
	h := make([]byte, frameHeaderLen, frameHeaderLen+len(payload))
	h[0] = stream
	binary.BigEndian.PutUint32(h[4:], uint32(len(payload)))
	return append(h, payload...)
}

func TestDemux(t *testing.T) {
	stream := bytes.Join([][]byte{
		frame(streamStdout, "out1 "), frame(streamStderr, "err1 "), frame(streamStdout, ""),
		frame(streamStdin, "in-as-out "), frame(streamStdout, "out2"),
	}, nil)
	var o, e bytes.Buffer
	n, err := Demux(&o, &e, bytes.NewReader(stream))
	if err != nil || o.String() != "out1 in-as-out out2" || e.String() != "err1 " || n != int64(o.Len()+e.Len()) {
		t.Fatalf("Demux = %d, %v; stdout %q stderr %q", n, err, o.String(), e.String())
	}
	// Read one byte at a time: frames split anywhere still demultiplex.
	o.Reset()
	e.Reset()
	if _, err := Demux(&o, &e, &oneByte{bytes.NewReader(stream)}); err != nil || o.String() != "out1 in-as-out out2" || e.String() != "err1 " {
		t.Fatalf("Demux byte by byte: %v; stdout %q stderr %q", err, o.String(), e.String())
	}
	// nil writers drop their stream.
	o.Reset()
	if _, err := Demux(&o, nil, bytes.NewReader(stream)); err != nil || o.String() != "out1 in-as-out out2" {
		t.Fatalf("Demux(stderr nil): %v; stdout %q", err, o.String())
	}
}

type oneByte struct{ r io.Reader }

func (o *oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

// A stream ending inside a header or a payload, an unknown stream and a
// daemon error frame are errors, after what came before them was copied.
func TestDemuxHostile(t *testing.T) {
	good := frame(streamStdout, "ok")
	for _, tc := range []struct {
		name    string
		stream  []byte
		is      error
		errText string
	}{
		{"truncated header", append(append([]byte{}, good...), 1, 0, 0), ErrTruncatedFrame, "3 of 8 header bytes"},
		{"truncated payload", append(append([]byte{}, good...), frame(streamStdout, "0123456789")[:12]...), ErrTruncatedFrame, "4 of 10 payload bytes"},
		{"unknown stream", append(append([]byte{}, good...), frame(7, "x")...), nil, "unknown stream 7"},
		{"system error", append(append([]byte{}, good...), frame(streamSystem, "exec failed: no such file")...), nil, "error from the Docker daemon: exec failed: no such file"},
	} {
		var o bytes.Buffer
		n, err := Demux(&o, io.Discard, bytes.NewReader(tc.stream))
		if err == nil || (tc.is != nil && !errors.Is(err, tc.is)) || !strings.Contains(err.Error(), tc.errText) {
			t.Errorf("%s: err %v, want one saying %q", tc.name, err, tc.errText)
		}
		if !strings.HasPrefix(o.String(), "ok") || n < 2 {
			t.Errorf("%s: the frame before it was not copied: %q (%d)", tc.name, o.String(), n)
		}
	}
	// A system-error frame's message is cut at MaxErrorBody.
	huge := frame(streamSystem, strings.Repeat("E", 4*MaxErrorBody))
	if _, err := Demux(io.Discard, io.Discard, bytes.NewReader(huge)); err == nil || len(err.Error()) > MaxErrorBody+64 {
		t.Errorf("huge system-error frame: a %d-byte error", len(fmt.Sprint(err)))
	}
	// A header claiming 4 GiB costs no memory: the payload streams through a
	// fixed buffer (github.com/moby/moby/api/pkg/stdcopy grows its buffer to
	// the claimed size).
	hdr := make([]byte, frameHeaderLen)
	hdr[0] = streamStdout
	binary.BigEndian.PutUint32(hdr[4:], 0xFFFFFFFF)
	r := io.MultiReader(bytes.NewReader(hdr), io.LimitReader(zeros{}, 8<<20))
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	n, err := Demux(io.Discard, io.Discard, r)
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrTruncatedFrame) || n != 8<<20 {
		t.Errorf("4 GiB header over 8 MiB: %d, %v; want 8 MiB copied and ErrTruncatedFrame", n, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
		t.Errorf("demultiplexing an 8 MiB frame allocated %d bytes", grew)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// hijackHandler answers an exec start as dockerd does: 101, then a frame
// sent in the same write as the reply's header (it must not be lost in
// the client's buffered reader), then what stdin brought until its
// half-close, echoed as stdout, then a stderr frame.
func hijackHandler(t *testing.T, sawHeaders chan<- http.Header) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/exec/e1/start") || r.Method != http.MethodPost {
			w.WriteHeader(404)
			io.WriteString(w, `{"message":"No such exec instance: x"}`)
			return
		}
		var body struct{ Detach, Tty bool }
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body.Detach || body.Tty {
			t.Errorf("exec start body %+v, %v", body, err)
		}
		sawHeaders <- r.Header.Clone()
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		reply := "HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"
		conn.Write(append([]byte(reply), frame(streamStdout, "first ")...))
		in, err := io.ReadAll(brw)
		if err != nil {
			t.Errorf("reading stdin: %v", err)
		}
		conn.Write(frame(streamStdout, string(in)))
		conn.Write(frame(streamStderr, "done"))
	}
}

// The attach upgrades its connection, delivers stdin, passes the
// half-close on as end of file and demultiplexes the output.
func TestExecAttachHijack(t *testing.T) {
	headers := make(chan http.Header, 1)
	c := fakeDaemon(t, hijackHandler(t, headers))
	ctx, cancel := context.WithCancel(context.Background())
	h, err := c.ExecAttach(ctx, "e1", false)
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the stream outlives the setup's context
	defer h.Close()
	hd := <-headers
	if hd.Get("Upgrade") != "tcp" || !strings.EqualFold(hd.Get("Connection"), "Upgrade") || hd.Get("Content-Type") != "application/json" {
		t.Errorf("attach headers %v", hd)
	}
	go func() {
		io.WriteString(h, "hello ")
		io.WriteString(h, "stdin")
		if err := h.CloseWrite(); err != nil {
			t.Errorf("CloseWrite: %v", err)
		}
	}()
	var o, e bytes.Buffer
	if _, err := h.Output(&o, &e); err != nil {
		t.Fatal(err)
	}
	if o.String() != "first hello stdin" || e.String() != "done" {
		t.Errorf("stdout %q stderr %q", o.String(), e.String())
	}
}

// An attach the daemon refuses is a classified error; one it never answers
// ends with the setup's context.
func TestExecAttachFailures(t *testing.T) {
	c := fakeDaemon(t, hijackHandler(t, make(chan http.Header, 1)))
	if _, err := c.ExecAttach(ctxT(t), "nope", false); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "No such exec instance") {
		t.Errorf("attach to a missing exec: %v, want ErrNotFound", err)
	}
	hung := make(chan struct{})
	defer close(hung)
	c = fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		<-hung
	})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := c.ExecAttach(ctx, "e1", false); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("attach to a daemon that never answers: %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the cancelled attach took %v", d)
	}
	// A 200 instead of a switch is an error, not a stream.
	c = fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "not a stream") })
	if _, err := c.ExecAttach(ctxT(t), "e1", false); err == nil || !strings.Contains(err.Error(), "did not switch") {
		t.Errorf("attach answered 200: %v", err)
	}
}

// A TTY exec's output is raw.
func TestExecAttachTTY(t *testing.T) {
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 UPGRADED\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n\x01\x00raw bytes")
	})
	h, err := c.ExecAttach(ctxT(t), "e1", true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var o bytes.Buffer
	if _, err := h.Output(&o, nil); err != nil || o.String() != "\x01\x00raw bytes" {
		t.Errorf("TTY output %q, %v", o.String(), err)
	}
}

// The requests carry what the Engine API expects: the create body's field
// names (Resources inlined, NanoCpus, MaskedPaths kept when empty),
// normalised capabilities, the list's label filter, the remove's flags,
// the one-shot stats sample.
func TestRequestShapes(t *testing.T) {
	seen := map[string]string{}
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		key := r.Method + " " + strings.TrimPrefix(r.URL.Path, "/v"+MinVersion)
		body, _ := io.ReadAll(r.Body)
		seen[key] = r.URL.RawQuery + "|" + string(body)
		switch key {
		case "POST /containers/create":
			io.WriteString(w, `{"Id":"c1","Warnings":["w"]}`)
		case "GET /containers/json":
			io.WriteString(w, `[{"Id":"c1","Labels":{"ironclaw.owner":"1.2"}}]`)
		case "GET /containers/c1/stats":
			io.WriteString(w, `{"memory_stats":{"usage":10,"max_usage":20},"cpu_stats":{"cpu_usage":{"total_usage":30}},"pids_stats":{"current":4}}`)
		case "GET /containers/c1/json":
			io.WriteString(w, `{"Id":"c1","State":{"Status":"running","Running":true,"Pid":42}}`)
		case "POST /containers/c1/exec":
			io.WriteString(w, `{"Id":"e1"}`)
		case "GET /exec/e1/json":
			io.WriteString(w, `{"ID":"e1","Running":false,"ExitCode":3}`)
		case "POST /containers/c1/start":
			w.WriteHeader(http.StatusNotModified)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	ctx := ctxT(t)
	pids := int64(64)
	res, err := c.ContainerCreate(ctx, "ironclaw-x", &Config{Image: "ironclaw/empty:1", Cmd: []string{}},
		&HostConfig{CapDrop: []string{"all"}, CapAdd: []string{"net_bind_service", "CAP_NET_BIND_SERVICE"}, MaskedPaths: []string{},
			Resources: Resources{NanoCPUs: 2e9, PidsLimit: &pids}})
	if err != nil || res.ID != "c1" || len(res.Warnings) != 1 {
		t.Fatalf("create = %+v, %v", res, err)
	}
	q, body, _ := strings.Cut(seen["POST /containers/create"], "|")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	hc, _ := got["HostConfig"].(map[string]any)
	if q != "name=ironclaw-x" || got["Image"] != "ironclaw/empty:1" || hc["NanoCpus"] != 2e9 || hc["PidsLimit"] != 64.0 ||
		fmt.Sprint(hc["CapDrop"]) != "[ALL]" || fmt.Sprint(hc["CapAdd"]) != "[CAP_NET_BIND_SERVICE]" ||
		fmt.Sprint(hc["MaskedPaths"]) != "[]" || hc["Resources"] != nil {
		t.Errorf("create request %s: %s", q, body)
	}
	list, err := c.ContainerList(ctx, true, "ironclaw.owner")
	if err != nil || len(list) != 1 || list[0].ID != "c1" || list[0].Labels["ironclaw.owner"] != "1.2" {
		t.Errorf("list = %+v, %v", list, err)
	}
	if q := seen["GET /containers/json"]; q != `all=1&filters=%7B%22label%22%3A%7B%22ironclaw.owner%22%3Atrue%7D%7D|` {
		t.Errorf("list query %q", q)
	}
	if err := c.ContainerRemove(ctx, "c1", true, true); err != nil || seen["DELETE /containers/c1"] != "force=1&v=1|" {
		t.Errorf("remove: %v, %q", err, seen["DELETE /containers/c1"])
	}
	s, err := c.ContainerStats(ctx, "c1")
	if err != nil || s.MemoryStats.Usage != 10 || s.MemoryStats.MaxUsage != 20 || s.CPUStats.CPUUsage.TotalUsage != 30 || s.PidsStats.Current != 4 ||
		seen["GET /containers/c1/stats"] != "one-shot=true&stream=false|" {
		t.Errorf("stats = %+v, %v (%q)", s, err, seen["GET /containers/c1/stats"])
	}
	if in, err := c.ContainerInspect(ctx, "c1"); err != nil || in.State == nil || in.State.Pid != 42 {
		t.Errorf("inspect = %+v, %v", in, err)
	}
	if err := c.ContainerStart(ctx, "c1"); err != nil {
		t.Errorf("start of a started container (304): %v", err)
	}
	id, err := c.ExecCreate(ctx, "c1", ExecConfig{User: "1:1", AttachStdout: true, Cmd: []string{"/bin/true"}})
	if err != nil || id != "e1" || !strings.Contains(seen["POST /containers/c1/exec"], `"User":"1:1"`) ||
		!strings.Contains(seen["POST /containers/c1/exec"], `"Cmd":["/bin/true"]`) {
		t.Errorf("exec create = %q, %v (%s)", id, err, seen["POST /containers/c1/exec"])
	}
	if in, err := c.ExecInspect(ctx, "e1"); err != nil || in.Running || in.ExitCode != 3 {
		t.Errorf("exec inspect = %+v, %v", in, err)
	}
	if err := c.ContainerPause(ctx, "c1"); err != nil || seen["POST /containers/c1/pause"] != "|" {
		t.Errorf("pause: %v", err)
	}
	if err := c.ContainerUnpause(ctx, "c1"); err != nil || seen["POST /containers/c1/unpause"] != "|" {
		t.Errorf("unpause: %v", err)
	}
}

// ContainerWait returns once dockerd took the wait, before the container
// exits; the exit status, or the daemon's error, comes on the channel.
func TestContainerWait(t *testing.T) {
	exit := make(chan string)
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("condition") != "next-exit" {
			t.Errorf("wait query %q", r.URL.RawQuery)
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		io.WriteString(w, <-exit)
	})
	ch, err := c.ContainerWait(ctxT(t), "c1", "next-exit")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-ch:
		t.Fatalf("wait ended before the container exited: %+v", res)
	case <-time.After(50 * time.Millisecond):
	}
	exit <- `{"StatusCode":7,"Error":null}`
	if res := <-ch; res.Err != nil || res.StatusCode != 7 {
		t.Errorf("wait = %+v", res)
	}
	ch, err = c.ContainerWait(ctxT(t), "c1", "next-exit")
	if err != nil {
		t.Fatal(err)
	}
	exit <- `{"StatusCode":-1,"Error":{"Message":"container removed"}}`
	if res := <-ch; res.Err == nil || res.Err.Error() != "container removed" {
		t.Errorf("wait with the daemon's error = %+v", res)
	}
	ch, err = c.ContainerWait(ctxT(t), "c1", "next-exit")
	if err != nil {
		t.Fatal(err)
	}
	exit <- `not json`
	if res := <-ch; res.Err == nil {
		t.Errorf("wait with a garbled reply = %+v", res)
	}
}

// The import sends the tar and reports an error dockerd puts in its
// message stream.
func TestImageImport(t *testing.T) {
	var gotQuery, gotBody string
	reply := `{"status":"sha256:abc"}` + "\n"
	c := fakeDaemon(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		gotQuery, gotBody = r.URL.RawQuery, string(b)
		io.WriteString(w, reply)
	})
	if err := c.ImageImport(ctxT(t), strings.NewReader("TAR"), "ironclaw/root:0123", "roots"); err != nil {
		t.Fatal(err)
	}
	if gotQuery != "fromSrc=-&message=roots&repo=ironclaw%2Froot%3A0123" || gotBody != "TAR" {
		t.Errorf("import request %q body %q", gotQuery, gotBody)
	}
	reply = `{"status":"x"}` + "\n" + `{"errorDetail":{"message":"archive/tar: invalid tar header"},"error":"archive/tar: invalid tar header"}` + "\n"
	if err := c.ImageImport(ctxT(t), strings.NewReader("TAR"), "ironclaw/root:0123", ""); err == nil || !strings.Contains(err.Error(), "invalid tar header") {
		t.Errorf("import failing in its stream: %v", err)
	}
	reply = `{"status":`
	if err := c.ImageImport(ctxT(t), strings.NewReader("TAR"), "ironclaw/root:0123", ""); err == nil {
		t.Errorf("import with a truncated message: no error")
	}
}

// BenchmarkDemux measures demultiplexing an exec's output (64 frames of
// 32 KiB, as dockerd writes a busy stdout) against copying the same bytes
// raw, the floor: their ratio is the framing's cost.
func BenchmarkDemux(b *testing.B) {
	payload := strings.Repeat("x", 32<<10)
	var stream []byte
	for i := 0; i < 64; i++ {
		stream = append(stream, frame(byte(1+i%2), payload)...)
	}
	// The backend's writers are plain io.Writers (no ReadFrom): so are these.
	out := onlyWriter{io.Discard}
	b.Run("frames", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			if _, err := Demux(out, out, onlyReader{bytes.NewReader(stream)}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("raw-copy-peer", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			if _, err := io.Copy(out, onlyReader{bytes.NewReader(stream)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// onlyReader hides bytes.Reader's WriteTo and onlyWriter io.Discard's
// ReadFrom, so that both sides copy through a buffer, as with a daemon
// connection and the backend's writers.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

type onlyWriter struct{ w io.Writer }

func (o onlyWriter) Write(p []byte) (int, error) { return o.w.Write(p) }
