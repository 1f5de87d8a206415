// Package metrics is the daemon's /metrics: counters with labels, one
// histogram, gauges read at scrape time, served in the Prometheus text
// exposition format, version 0.0.4.
//
// It replaces github.com/prometheus/client_golang, which every process
// that runs the ironclaw binary paid for at start (its package
// initialisers, procfs, client_model and the protobuf runtime they pull
// in: about 2.5 ms a process on a PVM guest) although only the daemon
// serves metrics, and only these few. It offers what the project uses and
// nothing more; the output for those metrics is what client_golang v1.25
// wrote (testdata/client_golang_v1.25.txt holds a scrape of it, and the
// tests hold this package to it byte for byte):
//
//   - families sorted by name, each with one "# HELP" and one "# TYPE"
//     line; a labelled family with no series yet is left out;
//   - series sorted by their label values, labels written sorted by name;
//   - HELP text escapes \ and newline; label values escape \, " and
//     newline; invalid UTF-8 in a label value becomes U+FFFD;
//   - values as Go's strconv 'g' format, NaN, +Inf, -Inf; no timestamps;
//   - a histogram's _bucket series are cumulative and end at le="+Inf",
//     then _sum and _count.
//
// The HTTP handler answers text only (no protobuf, no OpenMetrics: the
// client_golang handler offered protobuf only to clients that asked for
// it, and Prometheus takes the text format), gzip-compressed when the
// client accepts gzip. client_golang's Go runtime and process collectors
// (go_*, process_*) were never exposed: the daemon used a private registry
// without them, so none are reproduced.
//
// Label cardinality is bounded: a CounterVec holds at most MaxSeries
// series; a label combination first seen after that is counted in the
// series whose every label value is "other". Callers still fold
// free-text input into a few values themselves (see internal/api), so the
// cap is a backstop, not the plan.
//
// Everything is safe for concurrent use. The package does no work at
// init: there are no package-level variables with initialisers.
package metrics
