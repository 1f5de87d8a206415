package api

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ironclaw/ironclaw/internal/api/wire"
	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/errdefs"
)

// Ports configures inbound access to servers inside sandboxes: signed,
// expiring URLs served on a listener of their own (another origin than
// the API and the console, so a sandbox's pages can never script them),
// and TCP tunnels for `ironclaw sandbox port-forward`. Nil: off (policy
// ports.inbound).
type Ports struct {
	// Secret signs the URLs (the data directory's ports.secret).
	Secret []byte
	// BaseURL is the ports listener's root, e.g. "http://127.0.0.1:8788".
	BaseURL string
	// MaxTTL is the longest life of a URL, and its default.
	MaxTTL time.Duration
	// Dial connects into a running sandbox (session.Manager.DialPort).
	Dial func(ctx context.Context, id string, port uint16) (net.Conn, error)
}

// Bounds of inbound connections: each is a daemon goroutine pair and two
// descriptors for as long as the client keeps it.
const (
	maxInboundPerSandbox = 64
	maxInboundTotal      = 1024
)

// KindPortOpen is the audit kind of an issued port URL or an opened tunnel.
const KindPortOpen = "sandbox.port.open"

var (
	errPortsOff     = errdefs.New(errdefs.ErrForbidden, "inbound ports are off (policy ports.inbound)")
	errBadTicket    = errdefs.New(errdefs.ErrNotFound, "no such port URL (unknown, expired, or its sandbox ended)")
	errInboundLimit = errdefs.New(errdefs.ErrLimitExceeded, "too many inbound connections")
)

// inbound counts open inbound connections per sandbox and in total.
type inbound struct {
	mu    sync.Mutex
	per   map[string]int
	total int
}

func (in *inbound) take(id string) (release func(), err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.per == nil {
		in.per = map[string]int{}
	}
	switch {
	case in.per[id] >= maxInboundPerSandbox:
		return nil, fmt.Errorf("%w: sandbox %s has %d open, the most allowed", errInboundLimit, id, maxInboundPerSandbox)
	case in.total >= maxInboundTotal:
		return nil, fmt.Errorf("%w: the daemon holds %d, the most allowed", errInboundLimit, maxInboundTotal)
	}
	in.per[id]++
	in.total++
	var once sync.Once
	return func() {
		once.Do(func() {
			in.mu.Lock()
			defer in.mu.Unlock()
			if in.per[id]--; in.per[id] <= 0 {
				delete(in.per, id)
			}
			in.total--
		})
	}, nil
}

// ticket is the signed part of a port URL: "<sandbox>.<port>.<unix
// expiry>.<mac>", the MAC a truncated HMAC-SHA256 over the rest.
func (p *Ports) ticket(id string, port uint16, exp time.Time) string {
	body := id + "." + strconv.Itoa(int(port)) + "." + strconv.FormatInt(exp.Unix(), 10)
	return body + "." + p.mac(body)
}

func (p *Ports) mac(body string) string {
	h := hmac.New(sha256.New, p.Secret)
	h.Write([]byte(body))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// parseTicket checks a ticket's MAC and expiry.
func (p *Ports) parseTicket(t string, now time.Time) (id string, port uint16, err error) {
	parts := strings.Split(t, ".")
	if len(t) > 256 || len(parts) != 4 {
		return "", 0, errBadTicket
	}
	body := strings.Join(parts[:3], ".")
	if !hmac.Equal([]byte(p.mac(body)), []byte(parts[3])) {
		return "", 0, errBadTicket
	}
	n, err1 := strconv.ParseUint(parts[1], 10, 16)
	exp, err2 := strconv.ParseInt(parts[2], 10, 64)
	if err1 != nil || err2 != nil || now.Unix() >= exp {
		return "", 0, errBadTicket
	}
	return parts[0], uint16(n), nil
}

// openPort issues a URL for one of a sandbox's ports.
func (s *Server) openPort(w http.ResponseWriter, r *http.Request, who principal) error {
	id := r.PathValue("id")
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return err
	}
	var b wire.OpenPortRequest
	if err := decodeJSON(s.bodyOf(w, r), &b); err != nil {
		if errors.Is(err, io.EOF) {
			return badRequest("which port? {\"port\": N}")
		}
		return err
	}
	p := s.cfg.Ports
	if p == nil {
		return errPortsOff
	}
	ttl := time.Duration(b.TTL)
	switch {
	case b.Port < 1 || b.Port > 65535:
		return badRequest("port must be 1-65535")
	case ttl < 0 || ttl > p.MaxTTL:
		return badRequest(fmt.Sprintf("ttl must be at most %s (policy ports.url_ttl)", p.MaxTTL))
	case ttl == 0:
		ttl = p.MaxTTL
	}
	ports, err := s.m.Ports(id)
	if err != nil {
		return err
	}
	if !slices.Contains(ports, uint16(b.Port)) {
		return badRequest(fmt.Sprintf("port %d is not one of the ports the sandbox was created with (%v)", b.Port, ports))
	}
	exp := time.Now().Add(ttl).Truncate(time.Second)
	if _, err := s.log.Append(r.Context(), audit.Entry{Session: id, Actor: who.Name, Kind: KindPortOpen,
		Data: map[string]any{"port": b.Port, "url_expires_at": exp.UTC().Format(time.RFC3339)}}); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, wire.PortURL{Port: b.Port, URL: p.BaseURL + "/p/" + p.ticket(id, uint16(b.Port), exp) + "/", ExpiresAt: exp.UTC()})
	return nil
}

// connectPort tunnels one TCP connection to a sandbox's port over an
// HTTP/1.1 upgrade ("Upgrade: tcp"): `ironclaw sandbox port-forward`.
func (s *Server) connectPort(w http.ResponseWriter, r *http.Request, who principal) error {
	p := s.cfg.Ports
	if p == nil {
		return errPortsOff
	}
	id := r.PathValue("id")
	if _, err := s.sandboxOf(r.Context(), who, id); err != nil {
		return err
	}
	n, err := strconv.ParseUint(r.PathValue("port"), 10, 16)
	if err != nil || n == 0 {
		return badRequest("port must be 1-65535")
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "tcp") {
		return badRequest(`a tunnel is an upgrade: send "Connection: Upgrade" and "Upgrade: tcp"`)
	}
	ports, err := s.m.Ports(id)
	if err != nil {
		return err
	}
	if !slices.Contains(ports, uint16(n)) {
		return badRequest(fmt.Sprintf("port %d is not one of the ports the sandbox was created with (%v)", n, ports))
	}
	release, err := s.inbound.take(id)
	if err != nil {
		return err
	}
	defer release()
	// Recorded before anything reaches the sandbox.
	if _, err := s.log.Append(r.Context(), audit.Entry{Session: id, Actor: who.Name, Kind: KindPortOpen,
		Data: map[string]any{"port": n, "tunnel": true}}); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	up, err := p.Dial(ctx, id, uint16(n))
	cancel()
	if err != nil {
		return err
	}
	defer up.Close()
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return fmt.Errorf("api: the connection cannot be taken over for a tunnel: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Time{}) // the tunnel lives as long as both ends
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n"); err != nil {
		return nil
	}
	if err := rw.Flush(); err != nil {
		return nil
	}
	splice(conn, rw.Reader, up)
	return nil
}

// splice copies both ways until either side ends, then closes both.
func splice(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(up, buffered) // what the client sent, buffered reads first
		closeWrite(up)
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(client, up)
		closeWrite(client)
		done <- struct{}{}
	}()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// PortsHandler serves the ports listener: /p/<ticket>/... reverse-proxied
// (HTTP and WebSocket) to the ticket's sandbox and port. It needs no
// token; the ticket is the credential. Nil when ports are off.
func (s *Server) PortsHandler() http.Handler {
	p := s.cfg.Ports
	if p == nil {
		return nil
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.Path, "/p/")
		if !ok {
			writeError(w, classify(errBadTicket))
			return
		}
		t, path, _ := strings.Cut(rest, "/")
		id, port, err := p.parseTicket(t, time.Now())
		if err != nil {
			writeError(w, classify(err))
			return
		}
		release, err := s.inbound.take(id)
		if err != nil {
			writeError(w, classify(err))
			return
		}
		defer release()
		proxy := &httputil.ReverseProxy{
			Rewrite: func(pr *httputil.ProxyRequest) {
				pr.Out.URL.Scheme, pr.Out.URL.Host = "http", "127.0.0.1:"+strconv.Itoa(int(port))
				pr.Out.URL.Path, pr.Out.URL.RawPath = "/"+path, ""
				pr.Out.Host = pr.Out.URL.Host
				// Nothing of the caller's credentials reaches the sandbox.
				pr.Out.Header.Del("Authorization")
				pr.Out.Header.Del("Proxy-Authorization")
				pr.Out.Header.Del("Cookie")
				pr.SetXForwarded()
			},
			Transport: &http.Transport{
				DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
					dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
					defer cancel()
					return p.Dial(dctx, id, port)
				},
				DisableKeepAlives:      true,
				ResponseHeaderTimeout:  2 * time.Minute,
				MaxResponseHeaderBytes: 64 << 10,
			},
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				if errdefs.Class(err) != nil {
					writeError(w, classify(err)) // the sandbox ended, a limit
					return
				}
				// What the sandbox's server did is its own text: named, not quoted.
				writeError(w, &apiError{http.StatusBadGateway, wire.CodeUnavailable, fmt.Sprintf("the sandbox's server on port %d did not answer", port)})
			},
		}
		proxy.ServeHTTP(w, r)
	})
}
