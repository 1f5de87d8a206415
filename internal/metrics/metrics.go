package metrics

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// MaxSeries is how many label combinations one CounterVec holds; past it a
// new combination is counted under "other" in every label (see the package
// doc).
const MaxSeries = 1000

// overflowValue is the label value of the series past MaxSeries.
const overflowValue = "other"

// ErrInvalid is the class of every registration error: a bad name, label
// or bucket list, or a name registered twice.
var ErrInvalid = errors.New("metrics: invalid metric")

// Registry is a set of metric families, each under a unique name. The zero
// value is not usable; use NewRegistry.
type Registry struct {
	mu       sync.Mutex
	families map[string]family
}

// family is one registered metric: it appends its HELP, TYPE and sample
// lines to b, or nothing while it has no samples.
type family interface {
	appendText(b []byte) []byte
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{families: map[string]family{}}
}

func (r *Registry) register(name string, f family) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.families[name]; dup {
		return fmt.Errorf("%w: %q is registered already", ErrInvalid, name)
	}
	r.families[name] = f
	return nil
}

// snapshot is the families in exposition order (by name).
func (r *Registry) snapshot() []family {
	r.mu.Lock()
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]family, len(names))
	for i, n := range names {
		out[i] = r.families[n]
	}
	r.mu.Unlock()
	return out
}

// header is what every family writes first.
type header struct {
	name, help, typ string
}

func (h *header) appendHeader(b []byte) []byte {
	b = append(b, "# HELP "...)
	b = append(b, h.name...)
	b = append(b, ' ')
	b = appendEscaped(b, h.help, false)
	b = append(b, "\n# TYPE "...)
	b = append(b, h.name...)
	b = append(b, ' ')
	b = append(b, h.typ...)
	return append(b, '\n')
}

func newHeader(name, help, typ string) (header, error) {
	if !validName(name, true) {
		return header{}, fmt.Errorf("%w: metric name %q", ErrInvalid, name)
	}
	if !utf8.ValidString(help) {
		return header{}, fmt.Errorf("%w: help of %q is not UTF-8", ErrInvalid, name)
	}
	return header{name, help, typ}, nil
}

// CounterVec is a counter family with labels: one count per combination
// of label values.
type CounterVec struct {
	header
	labels []string // as declared: the order With takes values in
	order  []int    // indexes into labels, by label name: the order written

	mu     sync.RWMutex
	series map[string]*Counter // by label values, sanitized, joined with keySep
}

// Counter is one series of a CounterVec.
type Counter struct {
	values []string // as declared
	n      atomic.Uint64
}

// keySep joins label values into a map key. Values are valid UTF-8 by
// then, where the byte 0xff never occurs, so the key is unambiguous.
const keySep = "\xff"

// CounterVec registers a counter family called name with the given label
// names.
func (r *Registry) CounterVec(name, help string, labels ...string) (*CounterVec, error) {
	h, err := newHeader(name, help, "counter")
	if err != nil {
		return nil, err
	}
	if len(labels) == 0 {
		return nil, fmt.Errorf("%w: %q: a CounterVec needs a label", ErrInvalid, name)
	}
	for i, l := range labels {
		if !validName(l, false) || strings.HasPrefix(l, "__") {
			return nil, fmt.Errorf("%w: %q: label name %q", ErrInvalid, name, l)
		}
		if slices.Contains(labels[:i], l) {
			return nil, fmt.Errorf("%w: %q: label %q twice", ErrInvalid, name, l)
		}
	}
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	sort.Slice(order, func(i, j int) bool { return labels[order[i]] < labels[order[j]] })
	v := &CounterVec{header: h, labels: slices.Clone(labels), order: order, series: map[string]*Counter{}}
	if err := r.register(name, v); err != nil {
		return nil, err
	}
	return v, nil
}

// With returns the series for values (one per label, in the order the
// labels were declared), making it (at 0) if it is new. A wrong number of
// values is a programming error and panics.
func (v *CounterVec) With(values ...string) *Counter {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", v.name, len(v.labels), len(values)))
	}
	var buf [128]byte
	key := buf[:0]
	for i, s := range values {
		if i > 0 {
			key = append(key, keySep...)
		}
		key = appendValidUTF8(key, s)
	}
	v.mu.RLock()
	c := v.series[string(key)] // no allocation: the compiler converts in place for a lookup
	v.mu.RUnlock()
	if c != nil {
		return c
	}
	return v.add(string(key))
}

func (v *CounterVec) add(key string) *Counter {
	v.mu.Lock()
	defer v.mu.Unlock()
	if c := v.series[key]; c != nil {
		return c
	}
	if len(v.series) >= MaxSeries {
		return v.overflow()
	}
	c := &Counter{values: strings.Split(key, keySep)}
	v.series[key] = c
	return c
}

// overflow is the series every label of which is "other"; v.mu is held.
func (v *CounterVec) overflow() *Counter {
	values := make([]string, len(v.labels))
	for i := range values {
		values[i] = overflowValue
	}
	key := strings.Join(values, keySep)
	c := v.series[key]
	if c == nil {
		c = &Counter{values: values}
		v.series[key] = c
	}
	return c
}

// Inc adds one.
func (c *Counter) Inc() { c.n.Add(1) }

func (v *CounterVec) appendText(b []byte) []byte {
	v.mu.RLock()
	all := make([]*Counter, 0, len(v.series))
	for _, c := range v.series {
		all = append(all, c)
	}
	v.mu.RUnlock()
	if len(all) == 0 {
		return b
	}
	sort.Slice(all, func(i, j int) bool {
		for _, k := range v.order {
			if a, b := all[i].values[k], all[j].values[k]; a != b {
				return a < b
			}
		}
		return false
	})
	b = v.appendHeader(b)
	for _, c := range all {
		b = append(b, v.name...)
		b = append(b, '{')
		for n, k := range v.order {
			if n > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, v.labels[k], c.values[k])
		}
		b = append(b, "} "...)
		b = appendFloat(b, float64(c.n.Load()))
		b = append(b, '\n')
	}
	return b
}

// GaugeFunc registers a gauge whose value is read from fn at every
// scrape. fn must be safe to call from any goroutine.
func (r *Registry) GaugeFunc(name, help string, fn func() float64) error {
	h, err := newHeader(name, help, "gauge")
	if err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: %q: no function", ErrInvalid, name)
	}
	return r.register(name, &gaugeFunc{h, fn})
}

type gaugeFunc struct {
	header
	fn func() float64
}

func (g *gaugeFunc) appendText(b []byte) []byte {
	b = g.appendHeader(b)
	b = append(b, g.name...)
	b = append(b, ' ')
	b = appendFloat(b, g.fn())
	return append(b, '\n')
}

// Histogram counts observations into buckets by upper bound (inclusive),
// with their sum and count.
type Histogram struct {
	header
	bounds []float64 // strictly increasing, finite; +Inf is implied

	// One lock for counts, sum and count, so a scrape sees them agree (a
	// histogram here is observed once per command, not in a hot loop).
	mu     sync.Mutex
	counts []uint64 // per bucket, not cumulative; the last is above every bound
	sum    float64
	count  uint64
}

// Histogram registers a histogram with the given bucket upper bounds,
// which must increase strictly; a last bound of +Inf may be given or left
// implied.
func (r *Registry) Histogram(name, help string, buckets []float64) (*Histogram, error) {
	h, err := newHeader(name, help, "histogram")
	if err != nil {
		return nil, err
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if strings.HasSuffix(name, suffix) {
			return nil, fmt.Errorf("%w: histogram name %q ends in %s", ErrInvalid, name, suffix)
		}
	}
	bounds := slices.Clone(buckets)
	if n := len(bounds); n > 0 && math.IsInf(bounds[n-1], +1) {
		bounds = bounds[:n-1]
	}
	if len(bounds) == 0 {
		return nil, fmt.Errorf("%w: histogram %q has no buckets", ErrInvalid, name)
	}
	for i, x := range bounds {
		if math.IsNaN(x) || math.IsInf(x, 0) || i > 0 && x <= bounds[i-1] {
			return nil, fmt.Errorf("%w: histogram %q: buckets must be finite and increase strictly", ErrInvalid, name)
		}
	}
	hist := &Histogram{header: h, bounds: bounds, counts: make([]uint64, len(bounds)+1)}
	if err := r.register(name, hist); err != nil {
		return nil, err
	}
	return hist, nil
}

// Observe records x. (NaN is counted above every bound and makes the sum
// NaN, as client_golang did.)
func (h *Histogram) Observe(x float64) {
	i := sort.SearchFloat64s(h.bounds, x) // the first bound >= x
	h.mu.Lock()
	h.counts[i]++
	h.sum += x
	h.count++
	h.mu.Unlock()
}

func (h *Histogram) appendText(b []byte) []byte {
	h.mu.Lock()
	counts := slices.Clone(h.counts)
	sum, count := h.sum, h.count
	h.mu.Unlock()
	b = h.appendHeader(b)
	var cum uint64
	for i, c := range counts {
		cum += c
		b = append(b, h.name...)
		b = append(b, `_bucket{le="`...)
		if i < len(h.bounds) {
			b = appendFloat(b, h.bounds[i])
		} else {
			b = append(b, "+Inf"...)
		}
		b = append(b, `"} `...)
		b = appendFloat(b, float64(cum))
		b = append(b, '\n')
	}
	b = append(b, h.name...)
	b = append(b, "_sum "...)
	b = appendFloat(b, sum)
	b = append(b, '\n')
	b = append(b, h.name...)
	b = append(b, "_count "...)
	b = appendFloat(b, float64(count))
	return append(b, '\n')
}
