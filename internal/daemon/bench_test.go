package daemon

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/netlimit"
	"github.com/ironclaw/ironclaw/internal/store"
)

// anyTestName resolves every *.test name to loopback.
type anyTestName struct{}

func (anyTestName) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if strings.HasSuffix(host, ".test") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// brokerRig is an egress broker (as one sandbox gets it) with the real
// gateway, store and audit log, served on the host's loopback, and an
// upstream stand-in.
type brokerRig struct {
	gw       *gateway.Gateway
	eg       *egressAccess
	proxy    *httptest.Server
	bare     *httptest.Server // the same broker served without netlimit's bounds, for comparison
	upstream *httptest.Server
	port     string
}

func newBrokerRig(b *testing.B, allow []string, body []byte) *brokerRig {
	b.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, filepath.Join(b.TempDir(), "db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	log, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	b.Cleanup(up.Close)
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	for i := range allow {
		allow[i] = strings.ReplaceAll(allow[i], "PORT", port)
	}
	eg, err := newEgressAccess(ctx, EgressConfig{Allow: allow, AllowPrivate: []string{"127.0.0.0/8"}, Resolver: anyTestName{}}, st, log, nil, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	acts := &actions{eg: eg}
	gw, err := gateway.New(ctx, gateway.Options{Store: st, Audit: log, Actions: acts.table(), MaxPending: 1000})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	eg.gw.Store(gw)
	br, err := eg.Broker("sbx-bench", nil)
	if err != nil {
		b.Fatal(err)
	}
	// Served as in a sandbox: within netlimit's bounds.
	proxy := httptest.NewUnstartedServer(nil)
	proxy.Config = netlimit.NewServer(br, netlimit.Config{})
	proxy.Listener = netlimit.NewListener(proxy.Listener, netlimit.Config{})
	proxy.Start()
	b.Cleanup(proxy.Close)
	bare := httptest.NewServer(br)
	b.Cleanup(bare.Close)
	return &brokerRig{gw: gw, eg: eg, proxy: proxy, bare: bare, upstream: up, port: port}
}

func (r *brokerRig) client() *http.Client { return clientVia(r.proxy) }

func clientVia(proxy *httptest.Server) *http.Client {
	pu, _ := url.Parse(proxy.URL)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(pu), MaxIdleConnsPerHost: 64}}
}

// Decision -> held connection proceeds: a request to a new host is held by
// the broker until an operator approves; the time measured runs from the
// Decide call to the client holding the response. Every iteration is a new
// host, approved globally (a store write, as in production).
func BenchmarkDecisionToHeldRequest(b *testing.B) {
	r := newBrokerRig(b, nil, []byte("ok"))
	cl := r.client()
	ch, cancel := r.gw.Subscribe()
	defer cancel()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		done := make(chan error, 1)
		go func() {
			resp, err := cl.Get(fmt.Sprintf("http://h%d.test:%s/", i, r.port))
			if err == nil {
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					err = fmt.Errorf("status %d", resp.StatusCode)
				}
			}
			done <- err
		}()
		var a gateway.Approval
		for a = range ch {
			if a.Pending() {
				break
			}
		}
		start := time.Now()
		if _, err := r.gw.Decide(context.Background(), a.ID, gateway.Decision{Approve: true, Scope: gateway.ScopeGlobal, By: "bench"}); err != nil {
			b.Fatal(err)
		}
		if err := <-done; err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// Throughput of the broker for an allowlisted host: small GETs over
// keep-alive connections from 16 clients, through the broker and, in the
// same run, straight to the upstream (the peer) and through the same
// broker served without netlimit's connection and time bounds.
func BenchmarkBrokerThroughput(b *testing.B) {
	r := newBrokerRig(b, []string{"up.test:PORT"}, []byte("hello"))
	for _, c := range []struct {
		name string
		cl   *http.Client
		url  string
	}{
		{"direct", &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, r.upstream.URL + "/"},
		{"broker", r.client(), "http://up.test:" + r.port + "/"},
		{"broker-unbounded", clientVia(r.bare), "http://up.test:" + r.port + "/"},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetParallelism(8) // 16 clients on 2 cores
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp, err := c.cl.Get(c.url)
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}

// Bulk transfer through a CONNECT tunnel (what HTTPS uses), 4 MiB per
// request, against the same transfer straight from the upstream (and
// through the broker without netlimit's bounds).
func BenchmarkBrokerTunnel(b *testing.B) {
	body := make([]byte, 4<<20)
	r := newBrokerRig(b, []string{"up.test:PORT"}, body)
	for _, name := range []string{"direct", "broker", "broker-unbounded"} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for i := 0; i < b.N; i++ {
				var conn net.Conn
				var err error
				if name == "direct" {
					conn, err = net.Dial("tcp", r.upstream.Listener.Addr().String())
				} else {
					proxy := r.proxy
					if name == "broker-unbounded" {
						proxy = r.bare
					}
					conn, err = net.Dial("tcp", proxy.Listener.Addr().String())
					if err == nil {
						fmt.Fprintf(conn, "CONNECT up.test:%s HTTP/1.1\r\nHost: up.test:%s\r\n\r\n", r.port, r.port)
						buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
						if _, err = io.ReadFull(conn, buf); err == nil && !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
							err = fmt.Errorf("CONNECT: %q", buf)
						}
					}
				}
				if err != nil {
					b.Fatal(err)
				}
				fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: up.test\r\nConnection: close\r\n\r\n")
				n, _ := io.Copy(io.Discard, conn)
				conn.Close()
				if n < int64(len(body)) {
					b.Fatalf("read %d bytes", n)
				}
			}
		})
	}
}
