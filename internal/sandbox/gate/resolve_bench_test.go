package gate

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
)

// BenchmarkResolve: the daemon's share of a gated create, on the host
// view, once the hard-link search is cached.
func BenchmarkResolve(b *testing.B) {
	entries, err := rootfs.HostView("/", "sandbox")
	if err != nil {
		b.Skip(err)
	}
	v := View{Root: entries, HostView: true}
	gate := []string{"curl", "wget", "ssh", "scp", "nc", "socat", "telnet", "ftp"}
	p, err := Resolve(v, gate)
	if err != nil {
		b.Fatal(err)
	}
	p.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p, err := Resolve(v, gate)
		if err != nil {
			b.Fatal(err)
		}
		p.Close()
	}
}
