package image

import (
	"errors"
	"net/http"
	"testing"
)

func TestPlainHTTPOnlyToLoopback(t *testing.T) {
	s := &Store{insecure: map[string]bool{"registry.lan:5000": true, "10.1.2.3": true}}
	for host, want := range map[string]bool{
		"127.0.0.1:5000": true, "localhost:5000": true, "[::1]:5000": true, "127.0.0.1": true,
		"registry.lan:5000": true, "10.1.2.3:5000": true,
		"registry.lan:5001": false, "10.0.0.1:5000": false, "192.168.1.1": false, "example.com": false,
	} {
		if got := s.plainHTTPAllowed(host); got != want {
			t.Errorf("plainHTTPAllowed(%q) = %v, want %v", host, got, want)
		}
	}
	rt := httpsOnly{next: failTransport{}, allowed: s.plainHTTPAllowed}
	req, _ := http.NewRequest("GET", "http://192.168.1.1:5000/v2/", nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, ErrPlainHTTP) {
		t.Fatalf("plain HTTP to a private address: %v, want ErrPlainHTTP", err)
	}
	req, _ = http.NewRequest("GET", "https://192.168.1.1:5000/v2/", nil)
	if _, err := rt.RoundTrip(req); !errors.Is(err, errPassed) {
		t.Fatalf("HTTPS: %v, want it passed on", err)
	}
}

var errPassed = errors.New("passed to the next transport")

type failTransport struct{}

func (failTransport) RoundTrip(*http.Request) (*http.Response, error) { return nil, errPassed }

func TestCleanPath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		bad      bool
	}{
		{"a/b", "a/b", false},
		{"./a//b/", "a/b", false},
		{"/etc/passwd", "etc/passwd", false},
		{"./", "", false},
		{"../x", "", true},
		{"a/../../x", "", true},
		{"a/..", "", true},
		{"a\x00b", "", true},
	} {
		got, err := cleanPath(tc.in)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("cleanPath(%q) = %q, %v; want %q, bad=%v", tc.in, got, err, tc.want, tc.bad)
		}
		if tc.bad && !errors.Is(err, ErrUnsafeLayer) {
			t.Errorf("cleanPath(%q) error %v is not ErrUnsafeLayer", tc.in, err)
		}
	}
}
