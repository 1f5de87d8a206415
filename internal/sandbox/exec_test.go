package sandbox

import (
	"bytes"
	"testing"
)

func TestOutputCap(t *testing.T) {
	c := NewOutputCap(5)
	var a, b bytes.Buffer
	var na, nb int64
	wa, wb := c.Writer(&a, &na), c.Writer(&b, &nb)
	_, _ = wa.Write([]byte("abc"))
	_, _ = wb.Write([]byte("defg"))
	_, _ = wa.Write([]byte("h"))
	if a.String() != "abc" || b.String() != "de" || na != 4 || nb != 4 || !c.Truncated() {
		t.Errorf("a %q b %q counts %d %d truncated %v", a.String(), b.String(), na, nb, c.Truncated())
	}
}
