package textsafe

import "testing"

func TestCheckAndEscape(t *testing.T) {
	for _, c := range []struct {
		in, escaped string
		ok          bool
	}{
		{"api.github.com:443", "api.github.com:443", true},
		{"naïve café 東京", "naïve café 東京", true},
		{"ok\x1b[2K\rapprove me", `ok\x1b[2K\rapprove me`, false},
		{"evil.com\u202e moc.doog", `evil.com\u202e moc.doog`, false},
		{"a\u200bb", `a\u200bb`, false},
		{"two\nlines", `two\nlines`, false},
		{"back\\slash", `back\\slash`, true},
		{"bad\xffutf8", `bad\xffutf8`, false},
		{"c1\u009b31m", `c1\u009b31m`, false},
	} {
		if got := Escape(c.in); got != c.escaped {
			t.Errorf("Escape(%q) = %q, want %q", c.in, got, c.escaped)
		}
		if err := Check("summary", c.in); (err == nil) != c.ok {
			t.Errorf("Check(%q) = %v, want ok=%v", c.in, err, c.ok)
		}
	}
}
