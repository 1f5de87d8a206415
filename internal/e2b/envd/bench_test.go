package envd_test

import (
	"context"
	"testing"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
	rpc "github.com/ironclaw/ironclaw/internal/e2b/envdpb/process"
)

// BenchmarkCommandRun is what an E2B client's commands.run('true') costs
// end to end over HTTP (a Start stream through envd: a native spawn and
// an output follow, in process), against the native API's own exec of
// the same command in the same daemon, for the ratio.
func BenchmarkCommandRun(b *testing.B) {
	env := e2btest.Start(b, nil)
	sb := env.Create(b, nil)
	ctx := context.Background()
	b.Run("e2b", func(b *testing.B) {
		pc := env.Process(sb)
		no := false
		for b.Loop() {
			st, err := pc.Start(ctx, connect.NewRequest(&rpc.StartRequest{Process: &rpc.ProcessConfig{Cmd: "true"}, Stdin: &no}))
			if err != nil {
				b.Fatal(err)
			}
			ended := false
			for st.Receive() {
				if st.Msg().GetEvent().GetEnd() != nil {
					ended = true
				}
			}
			if err := st.Err(); err != nil || !ended {
				b.Fatalf("stream: %v, ended %v", err, ended)
			}
			st.Close()
		}
	})
	b.Run("native", func(b *testing.B) {
		for b.Loop() {
			res, err := env.Agent.Exec(ctx, sb.SandboxID, client.ExecRequest{Argv: []string{"true"}})
			if err != nil || res.Exit != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
}
