package netlimit

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serve runs h on a fresh loopback listener within c and returns its
// address and listener.
func serve(t *testing.T, h http.Handler, c Config) (string, *Listener) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if c.Budget == nil {
		c.Budget = NewBudget(1 << 20) // not the process's: tests run side by side
	}
	nl := NewListener(ln, c)
	srv := NewServer(h, c)
	go srv.Serve(nl)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), nl
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reads from c until it is closed by the server, failing the
// test if that takes longer than d (a generous bound, not a measurement).
func closedWithin(t *testing.T, c net.Conn, d time.Duration) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %v (read %q)", d, b)
	}
	return string(b)
}

// allHeld reports whether the server keeps every one of cs open: nothing
// arrives and no EOF for a moment.
func allHeld(cs []net.Conn) bool {
	deadline := time.Now().Add(300 * time.Millisecond)
	for _, c := range cs {
		c.SetReadDeadline(deadline)
	}
	for _, c := range cs {
		var b [1]byte
		_, err := c.Read(b[:])
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			return false
		}
		c.SetReadDeadline(time.Time{})
	}
	return true
}

func ok(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }

// A client opening far more connections than the cap gets the cap and a
// 503 for every other one; closing one frees its place.
func TestHostileConnFloodListenerCap(t *testing.T) {
	const max = 8
	addr, nl := serve(t, http.HandlerFunc(ok), Config{MaxConns: max, HeaderTimeout: time.Minute})
	var conns []net.Conn
	for range max {
		conns = append(conns, dial(t, addr))
	}
	for nl.Open() < max { // the accept loop runs on its own
		time.Sleep(time.Millisecond)
	}
	for i := range 200 {
		c := dial(t, addr)
		got := closedWithin(t, c, 10*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 503 ") || !strings.Contains(got, fmt.Sprintf("the %d connections", max)) {
			t.Fatalf("connection %d over the cap: %q", i, got)
		}
	}
	if nl.Open() != max || nl.Refused() != 200 {
		t.Fatalf("open %d refused %d", nl.Open(), nl.Refused())
	}
	if !allHeld(conns) {
		t.Fatal("a connection within the cap was closed")
	}
	conns[0].Close()
	for nl.Open() == max {
		time.Sleep(time.Millisecond)
	}
	c := dial(t, addr)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("after a close: %v %v", resp, err)
	}
}

// Listeners share a budget: one client filling it leaves none for the
// other listeners, never more.
func TestHostileConnFloodSharedBudget(t *testing.T) {
	b := NewBudget(10)
	a1, l1 := serve(t, http.HandlerFunc(ok), Config{MaxConns: 100, Budget: b, HeaderTimeout: time.Minute})
	a2, l2 := serve(t, http.HandlerFunc(ok), Config{MaxConns: 100, Budget: b, HeaderTimeout: time.Minute})
	var held1 []net.Conn
	for range 10 {
		held1 = append(held1, dial(t, a1))
	}
	for b.InUse() < 10 {
		time.Sleep(time.Millisecond)
	}
	for range 50 {
		got := closedWithin(t, dial(t, a1), 10*time.Second)
		if !strings.Contains(got, "all sandboxes") {
			t.Fatalf("over the budget: %q", got)
		}
	}
	got := closedWithin(t, dial(t, a2), 10*time.Second)
	if !strings.Contains(got, "503") {
		t.Fatalf("other listener over the budget: %q", got)
	}
	if b.InUse() != 10 || l1.Open() != 10 || l2.Open() != 0 {
		t.Fatalf("budget %d, open %d/%d", b.InUse(), l1.Open(), l2.Open())
	}
	for _, c := range held1 {
		c.Close()
	}
	for b.InUse() > 0 {
		time.Sleep(time.Millisecond)
	}
	c := dial(t, a2)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("after release: %v %v", resp, err)
	}
}

// A head sent slowly, or not at all, is cut at HeaderTimeout.
func TestHostileSlowHead(t *testing.T) {
	addr, nl := serve(t, http.HandlerFunc(ok), Config{HeaderTimeout: 200 * time.Millisecond})
	c := dial(t, addr)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	closedWithin(t, c, 30*time.Second)
	silent := dial(t, addr)
	closedWithin(t, silent, 30*time.Second)
	for nl.Open() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// bodyResult is what a handler saw of its body.
type bodyResult struct {
	n   int64
	err error
}

func reading(res chan<- bodyResult) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		res <- bodyResult{n, err}
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestTimeout)
			return
		}
		fmt.Fprintf(w, "%d", n)
	}
}

// Half of an 8 MiB body, then nothing: the read fails with ErrSlowBody
// and the connection is closed.
func TestHostileHalfSentBody(t *testing.T) {
	res := make(chan bodyResult, 1)
	addr, nl := serve(t, reading(res), Config{Body: BodyLimits{Timeout: 300 * time.Millisecond, Idle: 300 * time.Millisecond}})
	c := dial(t, addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", 8<<20)
	c.Write(make([]byte, 4<<20))
	select {
	case r := <-res:
		if !errors.Is(r.err, ErrSlowBody) || r.n != 4<<20 {
			t.Fatalf("handler read %d: %v", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled body was not cut")
	}
	closedWithin(t, c, 30*time.Second)
	for nl.Open() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// A trickle (a byte a while, never idle long enough) is cut once the
// total wait passes Timeout plus what its bytes earn at MinRate.
func TestHostileTrickledBody(t *testing.T) {
	res := make(chan bodyResult, 1)
	addr, _ := serve(t, reading(res), Config{Body: BodyLimits{Timeout: 300 * time.Millisecond, MinRate: 1 << 20, Idle: time.Minute}})
	c := dial(t, addr)
	fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n")
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				if _, err := c.Write([]byte("x")); err != nil {
					return
				}
			}
		}
	}()
	select {
	case r := <-res:
		if !errors.Is(r.err, ErrSlowBody) {
			t.Fatalf("handler: %d %v", r.n, r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the trickled body was not cut")
	}
}

// Bodies that keep coming are not cut, however long they take, and time
// the handler spends elsewhere does not count; a response streamed after
// the body outlives every body deadline.
func TestBodyLimitsSpareRealClients(t *testing.T) {
	lim := BodyLimits{Timeout: 200 * time.Millisecond, MinRate: 1 << 10, Idle: 5 * time.Second}
	mux := http.NewServeMux()
	mux.HandleFunc("/slow-handler", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(600 * time.Millisecond) // forwarding, approvals: not the client's time
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		fmt.Fprintf(w, "%d", n)
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		for i := range 8 {
			fmt.Fprintf(w, "chunk %d\n", i)
			http.NewResponseController(w).Flush()
			time.Sleep(100 * time.Millisecond)
		}
	})
	res := make(chan bodyResult, 1)
	mux.Handle("/", reading(res))
	addr, _ := serve(t, mux, Config{Body: lim})

	// 40 chunks of 4 KiB over about 800ms: four times Timeout, but at
	// well over MinRate.
	pr, pw := io.Pipe()
	go func() {
		for range 40 {
			pw.Write(make([]byte, 4096))
			time.Sleep(20 * time.Millisecond)
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", "http://"+addr+"/", pr)
	req.ContentLength = 40 * 4096
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "163840" {
		t.Fatalf("steady body: %d %q", resp.StatusCode, b)
	}
	<-res

	resp, err = http.Post("http://"+addr+"/slow-handler", "text/plain", strings.NewReader("hello"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(b) != "5" {
		t.Fatalf("slow handler: %d %q", resp.StatusCode, b)
	}

	resp, err = http.Post("http://"+addr+"/stream", "text/plain", strings.NewReader("go"))
	if err != nil {
		t.Fatal(err)
	}
	b, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || strings.Count(string(b), "chunk") != 8 {
		t.Fatalf("stream after the body: %q %v", b, err)
	}
}

// A client that stops reading a response fails the handler's writes
// after WriteTimeout, and the connection goes.
func TestHostileStalledReader(t *testing.T) {
	werr := make(chan error, 1)
	addr, nl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		for {
			if _, err := w.Write(buf); err != nil {
				werr <- err
				return
			}
		}
	}), Config{WriteTimeout: 300 * time.Millisecond})
	c := dial(t, addr)
	c.(*net.TCPConn).SetReadBuffer(4096)
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	select {
	case err := <-werr:
		if !errors.Is(err, syscall.EPIPE) && !strings.Contains(err.Error(), "timeout") {
			t.Logf("write error: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("writes to a client that does not read never failed")
	}
	for nl.Open() != 0 {
		time.Sleep(time.Millisecond)
	}
}

// Refusals and deadlines leave half-close working for tunnels.
func TestConnCloseWrite(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nl := NewListener(ln, Config{Budget: NewBudget(4)})
	defer nl.Close()
	go func() {
		c, _ := net.Dial("tcp", ln.Addr().String())
		if c != nil {
			io.ReadAll(c)
			c.Close()
		}
	}()
	c, err := nl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if nl.Open() != 0 || nl.budget.InUse() != 0 {
		t.Fatalf("double close: open %d, budget %d", nl.Open(), nl.budget.InUse())
	}
}

func TestBudgetFor(t *testing.T) {
	for _, c := range []struct {
		soft uint64
		want int
	}{
		{256, 64},        // small: half kept, half of the rest
		{1024, 256},      // MinReserve would take it all
		{20000, 8750},    // 20000 - 2500 reserve, halved
		{65536, 16384},   // 57344/2 = 28672, capped
		{1 << 20, 16384}, // capped
		{1 << 62, 16384}, // "unlimited"
		{4096, 1536},     // 4096 - 1024, halved
	} {
		if got := budgetFor(c.soft); got != c.want {
			t.Errorf("budgetFor(%d) = %d, want %d", c.soft, got, c.want)
		}
	}
}

func TestRaiseFileLimit(t *testing.T) {
	soft, err := RaiseFileLimit()
	if err != nil {
		t.Fatal(err)
	}
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if soft != lim.Cur || lim.Cur+1 < lim.Max {
		t.Fatalf("soft %d, limit %+v", soft, lim)
	}
	// A process that may raise its hard limit is raised to the kernel's
	// ceiling: a daemon holding thousands of sandboxes needs more than a
	// host's usual hard limit. (This project's VM withholds
	// CAP_SYS_RESOURCE even from root: there the hard limit stands.)
	if ceiling := nrOpen(); mayRaiseHardLimits(t) && ceiling > 0 && lim.Max != ceiling {
		t.Fatalf("with CAP_SYS_RESOURCE, hard limit %d, want fs.nr_open %d", lim.Max, ceiling)
	}
	if Process().Max() != budgetFor(soft) {
		t.Fatalf("process budget %d for %d", Process().Max(), soft)
	}
}

// mayRaiseHardLimits: this process holds CAP_SYS_RESOURCE (bit 24 of
// CapEff).
func mayRaiseHardLimits(t *testing.T) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<24) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// Budget is a plain counter under concurrency.
func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(100)
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 {
				if b.TryAcquire() {
					mu.Lock()
					got++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if got != 100 || b.InUse() != 100 {
		t.Fatalf("acquired %d, in use %d", got, b.InUse())
	}
}

// The cost of the bounds on the hot path: a bulk transfer over loopback
// TCP, writing to and reading from an accepted connection, bare and
// through a Listener (whose writes refresh a deadline), in the same run.
func BenchmarkAcceptedConn(b *testing.B) {
	const chunk = 32 << 10
	for _, name := range []string{"bare", "bounded", "bare-read", "bounded-read"} {
		b.Run(name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			var l net.Listener = ln
			if strings.HasPrefix(name, "bounded") {
				l = NewListener(ln, Config{Budget: NewBudget(10)})
			}
			defer l.Close()
			peer, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer peer.Close()
			c, err := l.Accept()
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			src, dst := c, peer // the server writes
			if strings.HasSuffix(name, "-read") {
				src, dst = peer, c
			}
			go io.Copy(io.Discard, bufio.NewReader(dst)) // bufio: as http.Server reads
			buf := make([]byte, chunk)
			b.SetBytes(chunk)
			b.ResetTimer()
			for range b.N {
				if _, err := src.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

type blockingBody struct{ release chan struct{} }

func (b blockingBody) Read([]byte) (int, error) { <-b.release; return 0, io.EOF }
func (b blockingBody) Close() error             { return nil }

// The request's context is cancelled by the connection's failed read
// before that Read returns to Body: Err must already say the body was too
// slow once its deadline has passed, or the handler reports a plain
// cancellation (503) instead of 408.
func TestBodyErrOnceTheDeadlinePassedMidRead(t *testing.T) {
	rel := make(chan struct{})
	defer close(rel)
	r := httptest.NewRequest("PUT", "/", nil)
	r.Body, r.ContentLength = blockingBody{rel}, 100
	b := LimitBody(httptest.NewRecorder(), r, BodyLimits{Timeout: 20 * time.Millisecond})
	go b.Read(make([]byte, 10))
	time.Sleep(5 * time.Millisecond)
	if err := b.Err(); err != nil {
		t.Fatalf("before the deadline: %v", err)
	}
	time.Sleep(60 * time.Millisecond)
	if err := b.Err(); !errors.Is(err, ErrSlowBody) {
		t.Fatalf("after the deadline, mid-read: %v, want ErrSlowBody", err)
	}
}

// A body read after its handler returned, as a Transport forwarding it
// does (its request-writing goroutine outlives the handler), must not
// touch the dead ResponseWriter: over HTTP/2 that panics the server.
func TestBodyReadAfterTheHandlerReturned(t *testing.T) {
	returned := make(chan struct{})
	readDone := make(chan error, 1)
	h := GuardBodies(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := r.Body
		go func() {
			<-returned
			time.Sleep(10 * time.Millisecond) // the server has finished the stream
			_, err := io.Copy(io.Discard, body)
			readDone <- err
		}()
		io.WriteString(w, "answered before the body was read")
	}), BodyLimits{Timeout: time.Second, Idle: time.Second})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r)
		close(returned)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	pr, pw := io.Pipe()
	go func() {
		pw.Write([]byte("first part"))
		time.Sleep(50 * time.Millisecond)
		pw.Close()
	}()
	req, _ := http.NewRequest("PUT", srv.URL, pr)
	req.ContentLength = -1
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.ProtoMajor != 2 {
		t.Fatalf("the test needs HTTP/2, got %s", resp.Proto)
	}
	io.Copy(io.Discard, resp.Body)
	select {
	case <-readDone: // any outcome but a panic: the stream is over
	case <-time.After(5 * time.Second):
		t.Fatal("the late read never returned")
	}
}
