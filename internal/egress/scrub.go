package egress

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
)

// A response to a request whose headers got secrets may echo them (an
// echo service, a debugging endpoint, an error page quoting the request):
// before it reaches the sandbox, every value the swap put in is turned back
// into what the sandbox sent, in the response's headers and body. The
// broker never learns a value from the store: it compares each header
// before and after Swap.

// scrubPair replaces from (what the swap wrote) with to (what the sandbox
// had sent).
type scrubPair struct{ from, to []byte }

// minScrub is the shortest value scrubbed: shorter differences are too
// likely to be ordinary text.
const minScrub = 4

// maxScrubPairs bounds the pairs of one request (headers are bounded by
// MaxHeaderBytes already).
const maxScrubPairs = 64

// scrubPairs derives the pairs from a request's headers before and after
// the swap: each changed value whole, the part that changed (the secret
// itself, however it is framed), and, for Basic credentials, the same of
// the decoded user:password.
func scrubPairs(before, after http.Header) []scrubPair {
	var out []scrubPair
	add := func(from, to string) {
		if len(from) < minScrub || from == to || len(out) >= maxScrubPairs {
			return
		}
		for _, p := range out {
			if string(p.from) == from {
				return
			}
		}
		out = append(out, scrubPair{[]byte(from), []byte(to)})
	}
	diff := func(newV, oldV string) {
		add(newV, oldV)
		p := 0
		for p < len(newV) && p < len(oldV) && newV[p] == oldV[p] {
			p++
		}
		s := 0
		for s < len(newV)-p && s < len(oldV)-p && newV[len(newV)-1-s] == oldV[len(oldV)-1-s] {
			s++
		}
		add(newV[p:len(newV)-s], oldV[p:len(oldV)-s])
	}
	for k, vs := range after {
		bvs := before[k]
		for i, v := range vs {
			if i >= len(bvs) {
				// A value the swap added: nothing the sandbox sent stands
				// for it.
				add(v, "[brokered secret]")
				continue
			}
			if bvs[i] == v {
				continue
			}
			diff(v, bvs[i])
			nb, nok := basicPart(v)
			ob, ook := basicPart(bvs[i])
			if nok && ook {
				diff(nb, ob)
			}
		}
	}
	return out
}

func basicPart(v string) (string, bool) {
	scheme, cred, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return "", false
	}
	return string(raw), true
}

func scrubString(s string, pairs []scrubPair) string {
	for _, p := range pairs {
		s = strings.ReplaceAll(s, string(p.from), string(p.to))
	}
	return s
}

// scrubHeader scrubs every name and value of h in place.
func scrubHeader(h http.Header, pairs []scrubPair) {
	for k, vs := range h {
		for i, v := range vs {
			vs[i] = scrubString(v, pairs)
		}
		if nk := scrubString(k, pairs); nk != k {
			delete(h, k)
			h[nk] = vs
		}
	}
}

// scrubReader streams r with every pair's from replaced by its to. It
// holds back only a tail that could be the start of a value, so streamed
// responses keep flowing.
type scrubReader struct {
	r     io.ReadCloser
	pairs []scrubPair
	buf   []byte // read, not yet scanned
	out   []byte // scanned, not yet returned
	err   error  // of r, once it ended
	chunk []byte
	atEOF func() // called once r ended (the trailers are known then)
}

func newScrubReader(r io.ReadCloser, pairs []scrubPair) *scrubReader {
	return &scrubReader{r: r, pairs: pairs, chunk: make([]byte, 32<<10)}
}

func (s *scrubReader) Close() error { return s.r.Close() }

func (s *scrubReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.err != nil && len(s.buf) == 0 {
			return 0, s.err
		}
		if s.err == nil {
			n, err := s.r.Read(s.chunk)
			s.buf = append(s.buf, s.chunk[:n]...)
			if err != nil {
				s.err = err
				if s.atEOF != nil {
					s.atEOF()
				}
			}
		}
		s.scan(s.err != nil)
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	if len(s.out) == 0 {
		s.out = nil
	}
	return n, nil
}

// scan moves buf to out, replacing, keeping back (unless final) the
// longest tail of buf that begins some pair's from.
func (s *scrubReader) scan(final bool) {
	limit := len(s.buf)
	if !final {
		limit -= s.heldTail()
	}
	i := 0
	for i < limit {
		pos, which := -1, -1
		for j, p := range s.pairs {
			if k := bytes.Index(s.buf[i:], p.from); k >= 0 && (pos < 0 || i+k < pos) {
				pos, which = i+k, j
			}
		}
		if pos < 0 || pos >= limit {
			s.out = append(s.out, s.buf[i:limit]...)
			i = limit
			break
		}
		s.out = append(s.out, s.buf[i:pos]...)
		s.out = append(s.out, s.pairs[which].to...)
		i = pos + len(s.pairs[which].from)
	}
	s.buf = append(s.buf[:0], s.buf[i:]...)
}

// heldTail is the length of the longest proper suffix of buf that is a
// prefix of some pair's from (it may complete with the next read).
func (s *scrubReader) heldTail() int {
	best := 0
	for _, p := range s.pairs {
		max := min(len(p.from)-1, len(s.buf))
		for k := max; k > best; k-- {
			if bytes.HasPrefix(p.from, s.buf[len(s.buf)-k:]) {
				best = k
				break
			}
		}
	}
	return best
}

// scrubResponse is the proxies' ModifyResponse: it scrubs what an
// injected request's response carries back.
func scrubResponse(resp *http.Response) error {
	p, _ := resp.Request.Context().Value(ctxKey{}).(*dialPlan)
	if p == nil || len(p.scrub) == 0 {
		return nil
	}
	scrubHeader(resp.Header, p.scrub)
	if resp.StatusCode == http.StatusSwitchingProtocols || resp.Body == nil || resp.Body == http.NoBody {
		// An upgraded connection's frames pass as they are.
		return nil
	}
	body := resp.Body
	switch strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding"))) {
	case "", "identity":
	case "gzip", "x-gzip":
		// Asked for identity, sent gzip anyway: decoded, so that it can
		// be scrubbed.
		zr, err := gzip.NewReader(body)
		if err != nil {
			return fmt.Errorf("egress: a gzip response that cannot be scrubbed: %w", err)
		}
		body = readCloser{zr, resp.Body}
		resp.Header.Del("Content-Encoding")
	default:
		// An encoding the broker cannot read might hide a value.
		return fmt.Errorf("egress: the response to a request that got a secret is %s-encoded and cannot be scrubbed", resp.Header.Get("Content-Encoding"))
	}
	sr := newScrubReader(body, p.scrub)
	// ReverseProxy copies the trailers after the body: scrub them when
	// the body has ended and the Transport has filled them in.
	sr.atEOF = func() { scrubHeader(resp.Trailer, p.scrub) }
	resp.Body = sr
	resp.Header.Del("Content-Length")
	resp.ContentLength = -1
	return nil
}

type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// placeholderScan is a plain-HTTP request body to a host without secrets,
// read with a look-out for placeholders: one makes the read fail, so the
// request ends there (the broker answers 403 and records secret.misuse).
type placeholderScan struct {
	io.ReadCloser
	b    *Broker
	tail []byte // the last bytes read, in case a placeholder straddles reads
	hit  atomic.Bool
}

// maxPlaceholder bounds a placeholder's length: the prefix, a 64-byte
// name, a dash and 32 hex digits.
const maxPlaceholder = len(placeholderPrefix) + 64 + 1 + 32

var errPlaceholderInBody = fmt.Errorf("the request body carries the placeholder of a brokered secret")

func (p *placeholderScan) Read(b []byte) (int, error) {
	if p.hit.Load() {
		return 0, errPlaceholderInBody
	}
	n, err := p.ReadCloser.Read(b)
	if n > 0 {
		win := append(p.tail, b[:n]...)
		if p.b.hasPlaceholder(win) {
			p.hit.Store(true)
			return 0, errPlaceholderInBody
		}
		if len(win) > maxPlaceholder {
			win = win[len(win)-maxPlaceholder:]
		}
		p.tail = append(p.tail[:0], win...)
	}
	return n, err
}
