package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway/kinds"
	"github.com/ironclaw/ironclaw/internal/store"
)

// Filing (and denying, so the backlog stays as it is) one request, with no
// other request pending and with 900 pending from 30 principals and 90
// sandboxes: the three quota counts use indexes, so the backlog should not
// show. Compare the two sub-benchmarks' ns/op.
func BenchmarkFileWithBacklog(b *testing.B) {
	for _, backlog := range []int{0, 900} {
		b.Run(fmt.Sprintf("pending=%d", backlog), func(b *testing.B) {
			ctx := context.Background()
			st, err := store.Open(ctx, filepath.Join(b.TempDir(), "db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			log, err := audit.New(ctx, st, audit.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer log.Close()
			g, err := New(ctx, Options{Store: st, Audit: log, MaxPendingTotal: 10000})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			for i := range backlog {
				if _, err := g.File(ctx, Request{Kind: KindEgressHost, Session: fmt.Sprintf("sbx-%d", i%90), By: fmt.Sprintf("agent:%d", i%30),
					Data: map[string]any{"host": fmt.Sprintf("h%d.example", i), "port": 443}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, err := g.File(ctx, Request{Kind: KindEgressHost, Session: "sbx-bench", By: "agent:bench", Note: "bench",
					Data: map[string]any{"host": "bench.example", "port": 443}})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := g.Decide(ctx, a.ID, Decision{By: "op"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// The strict decode and validation of a payload against a plain
// json.Unmarshal of the same bytes (the peer).
func BenchmarkDecodePayload(b *testing.B) {
	data := []byte(`{"egress_allow":["api.example.com:443","*.pypi.org"],"limits":{"memory":"1G","pids":512,"timeout":"5m","ttl":"2h"}}`)
	b.Run("json.Unmarshal", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			var m map[string]any
			if err := json.Unmarshal(data, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("kinds.Decode", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := kinds.Decode(KindSandboxWiden, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}
