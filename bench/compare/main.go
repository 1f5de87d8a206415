// Command compare times whole commands for bench/run.sh.
//
//	compare [flags] -- CMD ARGS...       time CMD, print one JSON line
//	compare runc-bundle [flags] DIR ARGS...   write an OCI bundle for runc/runsc
//	compare report [flags] RESULTS.jsonl      print the table, write markdown
//
// Timing is deliberately naive: wall time around exec.Command(...).Run(), the
// way a caller of each tool pays for it (process start, runtime setup, the
// workload, teardown, reaping). Every run must exit 0, or the numbers would
// be timing an error path, so any failure stops the tool loudly.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "runc-bundle":
			exitOn(runcBundle(os.Args[2:]))
			return
		case "report":
			exitOn(report(os.Args[2:]))
			return
		}
	}
	exitOn(timeCmd(os.Args[1:]))
}

func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// Result is one measured (peer, operation); run.sh collects these lines and
// "compare report" reads them back.
type Result struct {
	Peer     string  `json:"peer"`
	Op       string  `json:"op"`
	N        int     `json:"n"`
	MedianMs float64 `json:"median_ms"`
	P99Ms    float64 `json:"p99_ms"`
	MinMs    float64 `json:"min_ms"`
	MaxMs    float64 `json:"max_ms"`
	Cmd      string  `json:"cmd,omitempty"`
}

// idPlaceholder in an argument is replaced by an id unique to each run, for
// tools (runc) whose container names must not repeat.
const idPlaceholder = "{{id}}"

func timeCmd(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	n := fs.Int("n", 200, "measured runs")
	warmup := fs.Int("warmup", 3, "unmeasured runs first (page cache, lazily built state)")
	name := fs.String("name", "", "peer name for the output line")
	op := fs.String("op", "run", "operation name for the output line")
	teardown := fs.String("teardown", "", "command run untimed after each run (space-separated, "+idPlaceholder+" allowed); it must succeed too")
	timeout := fs.Duration("timeout", time.Minute, "limit for one run, so a hung peer fails instead of stalling the whole benchmark")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: compare [-n N] [-name PEER] [-op OP] [-teardown CMD] -- CMD ARGS...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	argv := fs.Args()
	if len(argv) == 0 || *n < 1 {
		fs.Usage()
		return errors.New("need a command and -n >= 1")
	}
	if *name == "" {
		*name = argv[0]
	}
	var down []string
	if *teardown != "" {
		down = strings.Fields(*teardown)
	}

	// The id includes our pid so two benchmark runs on one machine, or a
	// leftover from a crashed one, never collide.
	once := func(tag string) (time.Duration, error) {
		id := fmt.Sprintf("icb-%d-%s", os.Getpid(), tag)
		d, err := runOnce(subst(argv, id), *timeout)
		if err != nil {
			return 0, err
		}
		if down != nil {
			if _, err := runOnce(subst(down, id), *timeout); err != nil {
				return 0, fmt.Errorf("teardown: %w", err)
			}
		}
		return d, nil
	}
	for i := 0; i < *warmup; i++ {
		if _, err := once("w" + strconv.Itoa(i)); err != nil {
			return fmt.Errorf("%s warm-up run %d: %w", *name, i+1, err)
		}
	}
	ds := make([]time.Duration, 0, *n)
	for i := 0; i < *n; i++ {
		d, err := once(strconv.Itoa(i))
		if err != nil {
			return fmt.Errorf("%s run %d of %d: %w", *name, i+1, *n, err)
		}
		ds = append(ds, d)
	}
	r := summarize(*name, *op, ds)
	r.Cmd = strings.Join(argv, " ")
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	fmt.Println(string(line))
	return nil
}

func subst(argv []string, id string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = strings.ReplaceAll(a, idPlaceholder, id)
	}
	return out
}

// runOnce runs argv to completion and returns its wall time. Output is kept
// in memory (not a terminal, so no tty cost for anyone) and shown only when
// the run fails.
func runOnce(argv []string, timeout time.Duration) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	// A peer that leaves a process holding our pipes open (a detached
	// container, say) would otherwise keep Run waiting forever.
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("%q failed: %v\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(argv, " "), err, tail(out.Bytes()), tail(errb.Bytes()))
	}
	return d, nil
}

// tail keeps the end of a command's output, where the error usually is.
func tail(b []byte) []byte {
	const max = 4096
	if len(b) > max {
		b = append([]byte("...\n"), b[len(b)-max:]...)
	}
	if len(b) > 0 && b[len(b)-1] != '\n' {
		b = append(b, '\n')
	}
	return b
}

func summarize(name, op string, ds []time.Duration) Result {
	slices.Sort(ds)
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 } // ms, µs precision
	n := len(ds)
	median := ds[n/2]
	if n%2 == 0 {
		median = (ds[n/2-1] + ds[n/2]) / 2
	}
	// Nearest-rank p99: the smallest sample with at least 99% of samples at
	// or below it. With n=100 that is the second slowest run.
	p99 := ds[int(math.Ceil(0.99*float64(n)))-1]
	return Result{Peer: name, Op: op, N: n, MedianMs: ms(median), P99Ms: ms(p99), MinMs: ms(ds[0]), MaxMs: ms(ds[n-1])}
}
