package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Peer names the table treats specially. Ratios in each operation are
// against the ironclaw row of that operation: the CLI for "run" (both sides
// start a process per sandbox), the in-daemon benchmark for "exec" (the CLI
// exec through the daemon adds HTTP on top).
const (
	peerIronclaw = "ironclaw"
	peerInDaemon = "ironclaw (in-daemon)"
	opRun        = "run"
	opExec       = "exec"
)

// report reads the Result lines run.sh collected plus the raw `go test
// -bench` output, prints a plain table and writes the markdown file.
func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	out := fs.String("o", "bench/results.md", "markdown file to write")
	gobench := fs.String("gobench", "", "raw output of go test -bench")
	notes := fs.String("notes", "", "file of lines to list under Notes (skipped peers, ...)")
	info := fs.String("info", "", "file of 'key: value' lines for the header (versions, N, ...)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var results []Result
	for _, path := range fs.Args() {
		rs, err := readResults(path)
		if err != nil {
			return err
		}
		results = append(results, rs...)
	}
	var benchRaw []byte
	if *gobench != "" {
		var err error
		if benchRaw, err = os.ReadFile(*gobench); err != nil {
			return err
		}
	}
	benches := parseBench(benchRaw)
	rows := tableRows(results, benches)

	printTable(os.Stdout, rows)

	var md bytes.Buffer
	writeMarkdown(&md, rows, benches, benchRaw, readLines(*notes), readLines(*info))
	return os.WriteFile(*out, md.Bytes(), 0o644)
}

func readResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []Result
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		var r Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return nil, fmt.Errorf("%s: %v: %q", path, err, line)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}

func readLines(path string) []string {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var ls []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			ls = append(ls, l)
		}
	}
	return ls
}

// Bench is one parsed benchmark line: name, iterations, and every
// "value unit" pair after them (ns/op and whatever b.ReportMetric added).
type Bench struct {
	Name    string // without the -GOMAXPROCS suffix
	Iters   int64
	Metrics []Metric
}

type Metric struct {
	Value float64
	Unit  string
}

func (b Bench) metric(unit string) (float64, bool) {
	for _, m := range b.Metrics {
		if m.Unit == unit {
			return m.Value, true
		}
	}
	return 0, false
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseBench reads the standard benchmark line format generically, so
// benchmarks the lead adds or renames still show up.
func parseBench(raw []byte) []Bench {
	var bs []Bench
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		iters, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue // a benchmark's log line, not its result
		}
		b := Bench{Name: procsSuffix.ReplaceAllString(f[0], ""), Iters: iters}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			b.Metrics = append(b.Metrics, Metric{v, f[i+1]})
		}
		bs = append(bs, b)
	}
	return bs
}

// Row is one line of the comparison table.
type Row struct {
	Peer, Op   string
	N          int64
	Median     float64 // ms; NaN when not measured
	P99        float64 // ms; NaN when unknown
	Ratio      string
	Source     string // what produced the numbers
	IsBaseline bool
}

// inDaemon turns the in-daemon Go benchmarks into rows: p50-ms/p99-ms when
// the benchmark reports them, else ns/op as the median.
func inDaemon(benches []Bench, op string, names ...string) (Row, bool) {
	for _, want := range names {
		for _, b := range benches {
			if b.Name != want {
				continue
			}
			r := Row{Peer: peerInDaemon, Op: op, N: b.Iters, P99: math.NaN(), Source: b.Name}
			if v, ok := b.metric("p50-ms"); ok {
				r.Median = v
			} else if v, ok := b.metric("ns/op"); ok {
				r.Median = v / 1e6
			} else {
				continue
			}
			if v, ok := b.metric("p99-ms"); ok {
				r.P99 = v
			}
			return r, true
		}
	}
	return Row{}, false
}

func tableRows(results []Result, benches []Bench) []Row {
	var rows []Row
	add := func(r Result) {
		rows = append(rows, Row{Peer: r.Peer, Op: r.Op, N: int64(r.N), Median: r.MedianMs, P99: r.P99Ms, Source: r.Cmd})
	}
	// "run": ironclaw CLI first, then in-daemon, then the other peers in
	// the order run.sh measured them.
	for _, r := range results {
		if r.Op == opRun && r.Peer == peerIronclaw {
			add(r)
		}
	}
	if r, ok := inDaemon(benches, opRun, "BenchmarkCreateExecDestroy"); ok {
		rows = append(rows, r)
	}
	for _, r := range results {
		if r.Op == opRun && r.Peer != peerIronclaw {
			add(r)
		}
	}
	// "exec": `true` (the host's, a small C binary) is closer to our tiny
	// static /true than the probe (the whole test binary, whose Go start
	// initialises every package it links).
	if r, ok := inDaemon(benches, opExec, "BenchmarkExecRoundTrip/true", "BenchmarkExecRoundTrip/probe", "BenchmarkExecRoundTrip"); ok {
		rows = append(rows, r)
	} else if len(rows) > 0 && rows[0].Peer == peerIronclaw {
		rows = append(rows, Row{Peer: peerInDaemon, Op: opExec, Median: math.NaN(), P99: math.NaN(), Source: "in-daemon: see BenchmarkExecRoundTrip (not in this run's output)"})
	}
	for _, r := range results {
		if r.Op == opExec {
			add(r)
		}
	}
	// Anything else run.sh measured, in its order.
	for _, r := range results {
		if r.Op != opRun && r.Op != opExec {
			add(r)
		}
	}

	// Ratios: against the CLI row of the operation, else its in-daemon row;
	// an operation only ironclaw did (the CLI's own start) has none.
	others := map[string]bool{}
	for _, r := range rows {
		if r.Peer != peerIronclaw && r.Peer != peerInDaemon {
			others[r.Op] = true
		}
	}
	base := map[string]float64{}
	for _, pref := range []string{peerInDaemon, peerIronclaw} { // later wins
		for _, r := range rows {
			if r.Peer == pref && others[r.Op] && !math.IsNaN(r.Median) && r.Median > 0 {
				base[r.Op] = r.Median
			}
		}
	}
	for i := range rows {
		r := &rows[i]
		b, ok := base[r.Op]
		switch {
		case math.IsNaN(r.Median) || !ok:
			r.Ratio = "—"
		case r.Median == b && (r.Peer == peerIronclaw || r.Peer == peerInDaemon):
			r.Ratio = "1.0x (base)"
			r.IsBaseline = true
		default:
			r.Ratio = fmt.Sprintf("%.1fx", r.Median/b)
			if r.Median/b < 1 {
				r.Ratio = fmt.Sprintf("%.2fx", r.Median/b)
			}
		}
	}
	return rows
}

func ms(f float64) string {
	if math.IsNaN(f) {
		return "—"
	}
	if f < 10 {
		return fmt.Sprintf("%.2f", f)
	}
	return fmt.Sprintf("%.1f", f)
}

func count(n int64) string {
	if n == 0 {
		return "—"
	}
	return strconv.FormatInt(n, 10)
}

func printTable(w io.Writer, rows []Row) {
	const format = "%-22s %-9s %6s %10s %10s  %s\n"
	fmt.Fprintf(w, format, "peer", "operation", "n", "median ms", "p99 ms", "vs ironclaw")
	for _, r := range rows {
		fmt.Fprintf(w, format, r.Peer, r.Op, count(r.N), ms(r.Median), ms(r.P99), r.Ratio)
	}
}

func writeMarkdown(w io.Writer, rows []Row, benches []Bench, raw []byte, notes, info []string) {
	host, _ := os.Hostname()
	fmt.Fprintf(w, "# IronClaw benchmark results\n\n")
	fmt.Fprintf(w, "Produced by `sh bench/run.sh` on %s. See bench/README.md for what each number means.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "## Machine\n\n")
	fmt.Fprintf(w, "| | |\n|---|---|\n")
	fmt.Fprintf(w, "| host | %s |\n", host)
	fmt.Fprintf(w, "| kernel (uname -r) | %s |\n", firstLine("/proc/sys/kernel/osrelease"))
	fmt.Fprintf(w, "| CPUs (nproc) | %d × %s |\n", runtime.NumCPU(), cpuModel())
	fmt.Fprintf(w, "| memory | %s |\n", memTotal())
	fmt.Fprintf(w, "| cgroups | %s |\n", cgroupVersion())
	for _, l := range info {
		k, v, ok := strings.Cut(l, ":")
		if !ok {
			k, v = l, ""
		}
		fmt.Fprintf(w, "| %s | %s |\n", strings.TrimSpace(k), mdCell(strings.TrimSpace(v)))
	}

	fmt.Fprintf(w, "\n## Comparison\n\n")
	fmt.Fprintf(w, "Wall time per operation; ratio = peer median / ironclaw median for the same operation (higher is slower than ironclaw).\n")
	fmt.Fprintf(w, "`run` = start a new sandbox, run the static `/true` in it, tear it down. `exec` = run `/true` in an already running sandbox.\n\n")
	fmt.Fprintf(w, "| peer | operation | n | median ms | p99 ms | vs ironclaw | measured |\n")
	fmt.Fprintf(w, "|---|---|--:|--:|--:|--:|---|\n")
	for _, r := range rows {
		src := r.Source
		if r.Peer != peerInDaemon && src != "" {
			src = "`" + shortCmd(src) + "`"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", r.Peer, r.Op, count(r.N), ms(r.Median), ms(r.P99), r.Ratio, mdCell(src))
	}
	fmt.Fprintf(w, "\nThe `ironclaw` run row includes starting the CLI's own Go process; the in-daemon rows do not (one long-lived process, as the daemon will be).")
	fmt.Fprintf(w, " The exec ratios are against the in-daemon exec (what an agent gets through `ironclaw serve`, minus HTTP: about 1.5 ms more).\n")

	if len(notes) > 0 {
		fmt.Fprintf(w, "\n## Notes\n\n")
		for _, n := range notes {
			fmt.Fprintf(w, "- %s\n", mdCell(n))
		}
	}

	fmt.Fprintf(w, "\n## In-daemon Go benchmarks (internal/sandbox/native)\n\n")
	if len(benches) == 0 {
		fmt.Fprintf(w, "No benchmark lines were printed; see the raw output below.\n")
	} else {
		fmt.Fprintf(w, "| benchmark | iterations | metrics |\n|---|--:|---|\n")
		for _, b := range benches {
			var ms []string
			for _, m := range b.Metrics {
				ms = append(ms, fmt.Sprintf("%s %s", strconv.FormatFloat(m.Value, 'f', -1, 64), m.Unit))
			}
			fmt.Fprintf(w, "| %s | %d | %s |\n", b.Name, b.Iters, strings.Join(ms, ", "))
		}
	}
	fmt.Fprintf(w, "\nRaw output:\n\n```\n%s```\n", ensureNL(string(raw)))

	fmt.Fprintf(w, "\n## Commands\n\nEach was run 3 times unmeasured, then n times; every run had to exit 0. `{{id}}` is a fresh id per run.\n\n")
	for _, r := range rows {
		if r.Peer == peerInDaemon || r.Source == "" {
			continue
		}
		fmt.Fprintf(w, "- %s %s: `%s`\n", r.Peer, r.Op, r.Source)
	}
}

// shortCmd keeps the table readable: long argument lists (bwrap's binds)
// are cut; the full command is listed under Commands.
func shortCmd(s string) string {
	const max = 60
	if len(s) > max {
		return s[:max] + " …"
	}
	return s
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func ensureNL(s string) string {
	if s != "" && !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return s
}

func firstLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	l, _, _ := strings.Cut(string(data), "\n")
	return strings.TrimSpace(l)
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, l := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return runtime.GOARCH
}

func memTotal() string {
	data, _ := os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(l, "MemTotal:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err == nil {
				return fmt.Sprintf("%.1f GiB", kb/(1<<20))
			}
		}
	}
	return "?"
}

// cgroupVersion: v2 when the root is the unified hierarchy; "v1 hybrid" when
// v1 controllers sit beside a unified mount, as on this project's machines.
func cgroupVersion() string {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		return "v2 (unified)"
	}
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.controllers"); err == nil {
		return "v1 hybrid (v1 controllers + /sys/fs/cgroup/unified)"
	}
	return "v1"
}
