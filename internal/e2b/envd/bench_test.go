package envd_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/ironclaw/ironclaw/internal/client"
	"github.com/ironclaw/ironclaw/internal/e2b/e2btest"
	rpc "github.com/ironclaw/ironclaw/internal/e2b/envdpb/process"
)

// BenchmarkCommandRun is what an E2B client's commands.run('true') costs
// end to end over HTTP (a Start stream through envd: a native spawn and
// an output follow, in process), against the native API's own exec of
// the same command in the same daemon, for the ratio. Each also reports
// the process's CPU time per op (cpu-us/op: the daemon, the client and
// the command's own fork), which a busy machine moves less than wall
// time.
func BenchmarkCommandRun(b *testing.B) {
	env := e2btest.Start(b, nil)
	sb := env.Create(b, nil)
	ctx := context.Background()
	b.Run("e2b", func(b *testing.B) {
		pc := env.Process(sb)
		no := false
		defer reportCPU(b)()
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
		defer reportCPU(b)()
		for b.Loop() {
			res, err := env.Agent.Exec(ctx, sb.SandboxID, client.ExecRequest{Argv: []string{"true"}})
			if err != nil || res.Exit != 0 {
				b.Fatalf("%+v %v", res, err)
			}
		}
	})
}

// reportCPU starts counting the process's CPU time; the func it returns
// reports it per op.
func reportCPU(b *testing.B) func() {
	start := processCPU()
	return func() {
		b.ReportMetric(float64((processCPU()-start).Microseconds())/float64(b.N), "cpu-us/op")
	}
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
