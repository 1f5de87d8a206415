package audit

import (
	"math"
	"testing"
)

func TestSplitSeq(t *testing.T) {
	good := []struct {
		in   string
		seq  int64
		rest string
	}{
		{"1,rest", 1, "rest"},
		{"0,", 0, ""},
		{"-5,x", -5, "x"},
		{"9223372036854775807,x", math.MaxInt64, "x"},
		{"-9223372036854775808,x", math.MinInt64, "x"},
	}
	for _, c := range good {
		seq, rest, ok := splitSeq(c.in)
		if !ok || seq != c.seq || rest != c.rest {
			t.Errorf("splitSeq(%q) = %d, %q, %v; want %d, %q", c.in, seq, rest, ok, c.seq, c.rest)
		}
	}
	for _, bad := range []string{
		"", ",", "-,", "1", "1:", "1.5,", "abc,", " 1,", "9223372036854775808,", "-9223372036854775809,", "12345678901234567890,",
	} {
		if seq, rest, ok := splitSeq(bad); ok {
			t.Errorf("splitSeq(%q) accepted: %d, %q", bad, seq, rest)
		}
	}
}
