package metrics

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
)

// goldenRegistry builds, with this package, the scrape that
// testdata/client_golang_v1.25.txt holds as client_golang v1.25 wrote it:
// the daemon's metrics (same names, help, labels, buckets) driven the same
// way, plus families with hostile help text and label values.
func goldenRegistry(t testing.TB) *Registry {
	t.Helper()
	r := NewRegistry()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	creates, err := r.CounterVec("ironclaw_sandbox_creates_total", "Sandbox creations through the API, by result (ok or error).", "result")
	must(err)
	ends, err := r.CounterVec("ironclaw_sandbox_ends_total", "Sandboxes that ended, by final state and reason.", "state", "reason")
	must(err)
	execDur, err := r.Histogram("ironclaw_exec_duration_seconds", "Wall time of commands run through the API.",
		[]float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300})
	must(err)
	exits, err := r.CounterVec("ironclaw_exec_exits_total", "Commands run through the API, by exit code (0-255, else other).", "code")
	must(err)
	requests, err := r.CounterVec("ironclaw_api_requests_total", "API requests, by route pattern and status code.", "route", "code")
	must(err)
	must(r.GaugeFunc("ironclaw_sandboxes_active", "Sandboxes running now.", func() float64 { return 3 }))
	must(r.GaugeFunc("ironclaw_store_bytes", "Size of the database (main file, WAL and shared memory) in bytes.", func() float64 { return 1234567 }))
	must(r.GaugeFunc("ironclaw_store_free_bytes", "Bytes available on the file system holding the database.", func() float64 { return 98765432101 }))
	must(r.GaugeFunc("zz_odd", "Back\\slash and\nnewline \"quoted\".", func() float64 { return math.Inf(-1) }))
	oddv, err := r.CounterVec("zz_oddvec_total", "h", "b", "a")
	must(err)
	_, err = r.CounterVec("zz_empty_total", "never set", "x")
	must(err)

	creates.With("ok")
	creates.With("error")
	for range 1000000 {
		creates.With("ok").Inc()
	}
	creates.With("error").Inc()
	ends.With("reaped", "ttl").Inc()
	ends.With("destroyed", "destroy").Inc()
	ends.With("destroyed", "destroy").Inc()
	for _, v := range []float64{0.0005, 0.001, 0.003, 0.2, 7, 1000, 0.1} {
		execDur.Observe(v)
	}
	exits.With("0").Inc()
	exits.With("44").Inc()
	exits.With("other").Inc()
	requests.With("GET /v1/sandboxes/{id}", "200").Inc()
	requests.With("GET /v1/sandboxes/{id}", "404").Inc()
	requests.With("unmatched", "404").Inc()
	requests.With("POST /v1/sandboxes", "201").Inc()
	oddv.With("q\"uote", "back\\slash\nnl").Inc()
	oddv.With("b", "a").Inc()
	return r
}

// The output is byte for byte what client_golang wrote for the same
// metrics: no parser involved.
func TestExpositionMatchesClientGolang(t *testing.T) {
	want, err := os.ReadFile("testdata/client_golang_v1.25.txt")
	if err != nil {
		t.Fatal(err)
	}
	got := goldenRegistry(t).AppendText(nil)
	if !bytes.Equal(got, want) {
		t.Errorf("exposition differs from client_golang's\n--- got\n%s\n--- want\n%s", got, want)
	}
}

// The handler serves the format's content type, plain or gzip as asked.
func TestHandler(t *testing.T) {
	r := goldenRegistry(t)
	want := r.AppendText(nil)
	for _, tc := range []struct {
		accept string
		gz     bool
	}{
		{"", false}, {"gzip", true}, {"deflate, gzip;q=0.5", true}, {"gzip;q=0", false}, {"identity", false}, {"*", true},
	} {
		w := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/metrics", nil)
		if tc.accept != "" {
			req.Header.Set("Accept-Encoding", tc.accept)
		}
		r.ServeHTTP(w, req)
		if w.Code != 200 || w.Header().Get("Content-Type") != ContentType {
			t.Fatalf("%q: %d %q", tc.accept, w.Code, w.Header().Get("Content-Type"))
		}
		body := w.Body.Bytes()
		if gz := w.Header().Get("Content-Encoding") == "gzip"; gz != tc.gz {
			t.Fatalf("Accept-Encoding %q: gzip %v, want %v", tc.accept, gz, tc.gz)
		} else if gz {
			zr, err := gzip.NewReader(bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			if body, err = io.ReadAll(zr); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(body, want) {
			t.Errorf("Accept-Encoding %q: body differs", tc.accept)
		}
	}
}

// A strict reading of the text format, version 0.0.4: every line is a
// HELP, a TYPE or a sample; names are legal; a family's lines are
// together, HELP then TYPE then samples; label values use only the \\, \"
// and \n escapes; values parse; a histogram's buckets are cumulative, end
// at +Inf and are followed by _sum and a _count equal to the +Inf bucket.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type parsed struct {
	help, typ map[string]string
	samples   map[string][]sample // by family
	order     []string            // families as they appear
}

// errStrict is what parseStrict panics with, and recovers into an error.
type errStrict struct{ msg string }

func parseStrict(text string) (p parsed, err error) {
	defer func() {
		if v := recover(); v != nil {
			e, ok := v.(errStrict)
			if !ok {
				panic(v)
			}
			err = errors.New(e.msg)
		}
	}()
	p = parsed{help: map[string]string{}, typ: map[string]string{}, samples: map[string][]sample{}}
	if text != "" && !strings.HasSuffix(text, "\n") {
		panic(errStrict{"the exposition does not end in a newline"})
	}
	current := ""
	for n, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		fail := func(format string, a ...any) {
			panic(errStrict{fmt.Sprintf("line %d %q: %s", n+1, line, fmt.Sprintf(format, a...))})
		}
		switch {
		case strings.HasPrefix(line, "# HELP "):
			name, help, ok := strings.Cut(line[len("# HELP "):], " ")
			if !ok || !validName(name, true) {
				fail("bad HELP")
			}
			if _, dup := p.help[name]; dup || p.typ[name] != "" {
				fail("HELP twice or after TYPE")
			}
			if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(help, `\\`, ""), `\n`, ""), `\`) {
				fail("HELP has an escape other than \\\\ and \\n")
			}
			p.help[name], current = help, name
			p.order = append(p.order, name)
		case strings.HasPrefix(line, "# TYPE "):
			name, typ, ok := strings.Cut(line[len("# TYPE "):], " ")
			if !ok || name != current || p.typ[name] != "" {
				fail("TYPE not right after its HELP")
			}
			switch typ {
			case "counter", "gauge", "histogram":
			default:
				fail("type %q", typ)
			}
			p.typ[name] = typ
		case strings.HasPrefix(line, "#"):
			fail("a comment")
		default:
			s := parseSample(line, fail)
			fam := s.name
			if p.typ[current] == "histogram" {
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if s.name == current+suf {
						fam = current
					}
				}
			}
			if fam != current || p.typ[current] == "" {
				fail("a sample outside its family (family %q)", current)
			}
			if p.typ[current] == "counter" && (s.value < 0 || math.IsNaN(s.value)) {
				fail("a counter below 0")
			}
			if _, le := s.labels["le"]; le && p.typ[current] != "histogram" {
				fail("le outside a histogram")
			}
			p.samples[fam] = append(p.samples[fam], s)
		}
	}
	for _, name := range p.order {
		if len(p.samples[name]) == 0 {
			panic(errStrict{"family " + name + " has no samples"})
		}
		if p.typ[name] == "histogram" {
			if err := checkHistogram(name, p.samples[name]); err != nil {
				panic(errStrict{err.Error()})
			}
		}
	}
	return p, nil
}

func parseSample(line string, fail func(string, ...any)) sample {
	s := sample{labels: map[string]string{}}
	i := 0
	for i < len(line) && line[i] != '{' && line[i] != ' ' {
		i++
	}
	s.name = line[:i]
	if !validName(s.name, true) {
		fail("metric name %q", s.name)
	}
	rest := line[i:]
	if strings.HasPrefix(rest, "{") {
		rest = rest[1:]
		prev := ""
		for !strings.HasPrefix(rest, "}") {
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				fail("label without =\"")
			}
			name := rest[:eq]
			if !validName(name, false) {
				fail("label name %q", name)
			}
			if name <= prev {
				fail("labels not sorted by name, or one twice")
			}
			prev = name
			rest = rest[eq+2:]
			var v strings.Builder
		value:
			for {
				if rest == "" {
					fail("unterminated label value")
				}
				switch c := rest[0]; c {
				case '"':
					rest = rest[1:]
					break value
				case '\\':
					if len(rest) < 2 {
						fail("escape at the end")
					}
					switch rest[1] {
					case '\\':
						v.WriteByte('\\')
					case '"':
						v.WriteByte('"')
					case 'n':
						v.WriteByte('\n')
					default:
						fail("escape \\%c", rest[1])
					}
					rest = rest[2:]
				default:
					if c < 0x20 || c == 0x7f {
						fail("raw control character in a label value")
					}
					v.WriteByte(c)
					rest = rest[1:]
				}
			}
			s.labels[name] = v.String()
			if strings.HasPrefix(rest, ",") {
				rest = rest[1:]
				if strings.HasPrefix(rest, "}") {
					fail("trailing comma")
				}
			} else if !strings.HasPrefix(rest, "}") {
				fail("labels not separated by ,")
			}
		}
		rest = rest[1:]
	}
	val, ok := strings.CutPrefix(rest, " ")
	if !ok || strings.Contains(val, " ") {
		fail("not one space then a value (no timestamps)")
	}
	f, err := strconv.ParseFloat(val, 64)
	if err != nil {
		fail("value: %v", err)
	}
	switch strings.ToLower(val) {
	case "nan", "+inf", "-inf":
		if val != "NaN" && val != "+Inf" && val != "-Inf" {
			fail("value spelled %q", val)
		}
	case "inf", "infinity", "+infinity", "-infinity":
		fail("value spelled %q", val)
	}
	s.value = f
	return s
}

func checkHistogram(name string, ss []sample) error {
	last := math.Inf(-1)
	var prev, inf, count float64
	sawInf, sawSum, sawCount := false, false, false
	for _, s := range ss {
		switch s.name {
		case name + "_bucket":
			le, ok := s.labels["le"]
			if sawInf || !ok || len(s.labels) != 1 {
				return fmt.Errorf("%s: a bucket after +Inf or with labels %v", name, s.labels)
			}
			b, err := strconv.ParseFloat(le, 64)
			if err != nil || b <= last {
				return fmt.Errorf("%s: le %q not increasing", name, le)
			}
			if s.value < prev {
				return fmt.Errorf("%s: buckets not cumulative at le=%s", name, le)
			}
			last, prev = b, s.value
			if le == "+Inf" {
				sawInf, inf = true, s.value
			}
		case name + "_sum":
			if !sawInf || sawSum {
				return fmt.Errorf("%s: _sum before +Inf or twice", name)
			}
			sawSum = true
		case name + "_count":
			if !sawSum || sawCount {
				return fmt.Errorf("%s: _count before _sum or twice", name)
			}
			sawCount, count = true, s.value
		}
	}
	if !sawInf || !sawSum || !sawCount || count != inf {
		return fmt.Errorf("%s: +Inf %v (%v), _sum %v, _count %v (%v)", name, sawInf, inf, sawSum, sawCount, count)
	}
	return nil
}

// The strict reading accepts the golden scrape and gets back exactly the
// values that went in, escapes and all.
func TestExpositionParsesStrictly(t *testing.T) {
	p, err := parseStrict(string(goldenRegistry(t).AppendText(nil)))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ironclaw_api_requests_total", "ironclaw_exec_duration_seconds", "ironclaw_exec_exits_total",
		"ironclaw_sandbox_creates_total", "ironclaw_sandbox_ends_total", "ironclaw_sandboxes_active",
		"ironclaw_store_bytes", "ironclaw_store_free_bytes", "zz_odd", "zz_oddvec_total"}
	if strings.Join(p.order, " ") != strings.Join(want, " ") {
		t.Errorf("families %v, want %v (sorted; the empty vec left out)", p.order, want)
	}
	if p.help["zz_odd"] != `Back\\slash and\nnewline "quoted".` {
		t.Errorf("help %q", p.help["zz_odd"])
	}
	odd := p.samples["zz_oddvec_total"]
	if len(odd) != 2 || odd[1].labels["a"] != "back\\slash\nnl" || odd[1].labels["b"] != `q"uote` {
		t.Errorf("label values %+v", odd)
	}
	if c := p.samples["ironclaw_sandbox_creates_total"]; len(c) != 2 || c[1].labels["result"] != "ok" || c[1].value != 1e6 {
		t.Errorf("creates %+v", c)
	}
	h := p.samples["ironclaw_exec_duration_seconds"]
	if len(h) != 19 || h[16].labels["le"] != "+Inf" || h[16].value != 7 || h[17].value != 1007.3045000000001 || h[18].value != 7 {
		t.Errorf("histogram %+v", h)
	}
}

// The strict reading itself fails on what breaks the format. (A checker
// that cannot fail is worse than none.)
func TestStrictParserCatchesBreakage(t *testing.T) {
	good := "# HELP a_total h\n# TYPE a_total counter\na_total{x=\"1\"} 1\n"
	hist := "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 3\nh_count 2\n"
	for _, bad := range []string{
		strings.Replace(good, `x="1"`, `x="a"b"`, 1),
		strings.Replace(good, `x="1"`, `x="a\tb"`, 1),
		strings.Replace(good, `x="1"`, "x=\"a\nb\"", 1),
		strings.Replace(good, `x="1"`, `x="1",`, 1),
		strings.Replace(good, `x="1"`, `y="1",x="2"`, 1),
		strings.Replace(good, `x="1"`, `9x="1"`, 1),
		strings.Replace(good, "a_total{", "a-total{", 1),
		strings.Replace(good, "} 1\n", "} 1 123\n", 1),
		strings.Replace(good, "} 1\n", "} one\n", 1),
		strings.Replace(good, "# TYPE a_total counter\n", "", 1),
		strings.Replace(good, "counter", "summary", 1),
		good + "b 1\n",
		strings.TrimSuffix(good, "\n"),
		strings.Replace(hist, "h_bucket{le=\"+Inf\"} 2\n", "", 1),
		strings.Replace(hist, "h_count 2", "h_count 3", 1),
		strings.Replace(hist, "h_sum 3\n", "", 1),
		strings.Replace(hist, `le="1"} 1`, `le="1"} 3`, 1),
	} {
		if _, err := parseStrict(bad); err == nil {
			t.Errorf("the strict reading accepts %q", bad)
		}
	}
	if _, err := parseStrict(good + hist); err != nil {
		t.Fatal(err)
	}
}
