package metrics

import (
	"compress/gzip"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ContentType is the text exposition format's media type, as
// client_golang v1.25 labelled it (escaping=underscores: names are
// legacy-valid, so nothing is escaped).
const ContentType = "text/plain; version=0.0.4; charset=utf-8; escaping=underscores"

// AppendText appends every family's exposition to b.
func (r *Registry) AppendText(b []byte) []byte {
	for _, f := range r.snapshot() {
		b = f.appendText(b)
	}
	return b
}

// ServeHTTP writes the exposition, gzip-compressed if the request accepts
// gzip.
func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body := r.AppendText(nil)
	h := w.Header()
	h.Set("Content-Type", ContentType)
	h.Set("Vary", "Accept-Encoding")
	if !acceptsGzip(req.Header.Values("Accept-Encoding")) {
		h.Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body) // a client that went away: nothing to tell it
		return
	}
	h.Set("Content-Encoding", "gzip")
	zw := gzip.NewWriter(w)
	_, _ = zw.Write(body)
	_ = zw.Close()
}

// acceptsGzip reports whether an Accept-Encoding header lists gzip (or *)
// without q=0.
func acceptsGzip(values []string) bool {
	for _, v := range values {
		for _, part := range strings.Split(v, ",") {
			coding, params, _ := strings.Cut(part, ";")
			coding = strings.ToLower(strings.TrimSpace(coding))
			if coding != "gzip" && coding != "*" {
				continue
			}
			if q, ok := strings.CutPrefix(strings.ReplaceAll(params, " ", ""), "q="); ok {
				if f, err := strconv.ParseFloat(q, 64); err == nil && f == 0 {
					continue
				}
			}
			return true
		}
	}
	return false
}

// WriteText writes the exposition to w.
func (r *Registry) WriteText(w io.Writer) error {
	_, err := w.Write(r.AppendText(nil))
	return err
}

// appendFloat writes f as client_golang's text writer did.
func appendFloat(b []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(b, "NaN"...)
	case math.IsInf(f, +1):
		return append(b, "+Inf"...)
	case math.IsInf(f, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, f, 'g', -1, 64)
}

// appendLabel writes name="value".
func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, `="`...)
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// appendEscaped escapes \ and newline, and " too in a label value.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, `\\`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '"' && quote:
			b = append(b, `\"`...)
		default:
			b = append(b, c)
		}
	}
	return b
}

// appendValidUTF8 appends s with each invalid byte sequence replaced by
// U+FFFD.
func appendValidUTF8(b []byte, s string) []byte {
	if utf8.ValidString(s) {
		return append(b, s...)
	}
	return append(b, strings.ToValidUTF8(s, "\uFFFD")...)
}

// validName reports whether s is a legacy metric name
// ([a-zA-Z_:][a-zA-Z0-9_:]*) or, without colons, a label name.
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9' || colon && c == ':'
		if !ok {
			return false
		}
	}
	return true
}
