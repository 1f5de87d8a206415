package metrics

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A vec holds MaxSeries series; what comes after is counted under "other",
// and the output stays well formed.
func TestCardinalityIsBounded(t *testing.T) {
	r := NewRegistry()
	v, err := r.CounterVec("x_total", "h", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxSeries + 500 {
		v.With(strconv.Itoa(i), "v").Inc()
	}
	v.With("0", "v").Inc() // an existing series still counts as itself
	v.mu.RLock()
	n := len(v.series)
	v.mu.RUnlock()
	if n != MaxSeries+1 {
		t.Fatalf("%d series, want %d and the overflow one", n, MaxSeries+1)
	}
	p, err := parseStrict(string(r.AppendText(nil)))
	if err != nil {
		t.Fatal(err)
	}
	var other, zero float64
	for _, s := range p.samples["x_total"] {
		switch {
		case s.labels["a"] == "other" && s.labels["b"] == "other":
			other = s.value
		case s.labels["a"] == "0":
			zero = s.value
		}
	}
	if other != 500 || zero != 2 {
		t.Errorf("overflow series %v (want 500), series 0 %v (want 2)", other, zero)
	}
}

// Hostile label values (invalid UTF-8, every escape, a would-be key
// separator) come out escaped and valid, and distinct values stay
// distinct series.
func TestHostileLabelValues(t *testing.T) {
	r := NewRegistry()
	v, err := r.CounterVec("x_total", "h", "a", "b")
	if err != nil {
		t.Fatal(err)
	}
	v.With("a\xffb", "").Inc()
	v.With("a", "\xffb").Inc()
	v.With("\\\"\n", "}{,=").Inc()
	p, err := parseStrict(string(r.AppendText(nil)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range p.samples["x_total"] {
		got[s.labels["a"]+"|"+s.labels["b"]] = s.value
	}
	for _, want := range []string{"a\uFFFDb|", "a|\uFFFDb", "\\\"\n|}{,="} {
		if got[want] != 1 {
			t.Errorf("series %q: %v (all: %v)", want, got[want], got)
		}
	}
}

// Registration refuses what would make the output wrong, with ErrInvalid.
func TestRegistrationErrors(t *testing.T) {
	r := NewRegistry()
	if _, err := r.CounterVec("ok_total", "h", "l"); err != nil {
		t.Fatal(err)
	}
	fn := func() float64 { return 0 }
	for name, err := range map[string]error{
		"duplicate":         r.GaugeFunc("ok_total", "h", fn),
		"bad name":          r.GaugeFunc("9x", "h", fn),
		"dash":              r.GaugeFunc("a-b", "h", fn),
		"nil func":          r.GaugeFunc("g", "h", nil),
		"help not utf-8":    r.GaugeFunc("g2", "\xff", fn),
		"no labels":         second(r.CounterVec("c1_total", "h")),
		"bad label":         second(r.CounterVec("c2_total", "h", "a:b")),
		"reserved label":    second(r.CounterVec("c3_total", "h", "__x")),
		"label twice":       second(r.CounterVec("c4_total", "h", "a", "a")),
		"no buckets":        second(r.Histogram("h1", "h", nil)),
		"only +Inf":         second(r.Histogram("h2", "h", []float64{math.Inf(1)})),
		"not increasing":    second(r.Histogram("h3", "h", []float64{1, 1})),
		"NaN bucket":        second(r.Histogram("h4", "h", []float64{math.NaN()})),
		"-Inf bucket":       second(r.Histogram("h5", "h", []float64{math.Inf(-1), 1})),
		"histogram _bucket": second(r.Histogram("h6_bucket", "h", []float64{1})),
	} {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	// A refused registration registered nothing.
	out := string(r.AppendText(nil))
	if strings.Contains(out, "# HELP g") || strings.Contains(out, "c1_total") || strings.Contains(out, "h1") {
		t.Errorf("a refused metric is exposed:\n%s", out)
	}
	// A given trailing +Inf is the implied one, not a second.
	h, err := r.Histogram("h7", "h", []float64{1, math.Inf(1)})
	if err != nil {
		t.Fatal(err)
	}
	h.Observe(2)
	if out := string(r.AppendText(nil)); strings.Count(out, `h7_bucket{le="+Inf"} 1`) != 1 || !strings.Contains(out, `h7_bucket{le="1"} 0`) {
		t.Errorf("histogram with +Inf given:\n%s", out)
	}
	defer func() {
		if recover() == nil {
			t.Error("With with the wrong number of values did not panic")
		}
	}()
	v, _ := r.CounterVec("c5_total", "h", "a", "b")
	v.With("only one")
}

func second[T any](_ T, err error) error { return err }

// Bucket bounds are inclusive, as in client_golang.
func TestHistogramBounds(t *testing.T) {
	r := NewRegistry()
	h, err := r.Histogram("d", "h", []float64{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range []float64{1, 1.5, 2, 2.5, -3} {
		h.Observe(x)
	}
	want := "# HELP d h\n# TYPE d histogram\n" +
		"d_bucket{le=\"1\"} 2\nd_bucket{le=\"2\"} 4\nd_bucket{le=\"+Inf\"} 5\nd_sum 4\nd_count 5\n"
	if got := string(r.AppendText(nil)); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// Increments, observations and scrapes from many goroutines lose nothing
// (run with -race as well).
func TestConcurrentUse(t *testing.T) {
	r := NewRegistry()
	v, err := r.CounterVec("c_total", "h", "route", "code")
	if err != nil {
		t.Fatal(err)
	}
	h, err := r.Histogram("d", "h", []float64{0.5})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 2000
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := parseStrict(string(r.AppendText(nil))); err != nil {
				scraped <- err
				return
			}
		}
	}()
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				v.With("r"+strconv.Itoa(i%7), strconv.Itoa(w%3)).Inc()
				h.Observe(float64(i%2) * 0.75)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-scraped; err != nil {
		t.Fatal(err)
	}
	p, err := parseStrict(string(r.AppendText(nil)))
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, s := range p.samples["c_total"] {
		total += s.value
	}
	hs := p.samples["d"]
	if total != workers*each || len(p.samples["c_total"]) != 21 || hs[0].value != workers*each/2 || hs[3].value != workers*each {
		t.Errorf("counted %v over %d series, histogram %+v; want %d", total, len(p.samples["c_total"]), hs, workers*each)
	}
}

// With on an existing series allocates nothing (it runs on every API
// request).
func TestWithDoesNotAllocate(t *testing.T) {
	r := NewRegistry()
	v, err := r.CounterVec("c_total", "h", "route", "code")
	if err != nil {
		t.Fatal(err)
	}
	v.With("GET /v1/sandboxes/{id}", "200")
	if n := testing.AllocsPerRun(100, func() { v.With("GET /v1/sandboxes/{id}", "200").Inc() }); n != 0 {
		t.Errorf("%v allocations per With", n)
	}
}

func BenchmarkCounterVecInc(b *testing.B) {
	r := NewRegistry()
	v, err := r.CounterVec("c_total", "h", "route", "code")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		v.With("GET /v1/sandboxes/{id}", "200").Inc()
	}
}

func BenchmarkScrape(b *testing.B) {
	r := goldenRegistry(b)
	b.ReportAllocs()
	var buf []byte
	for b.Loop() {
		buf = r.AppendText(buf[:0])
	}
}
