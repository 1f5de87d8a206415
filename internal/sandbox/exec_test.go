package sandbox

import (
	"bytes"
	"context"
	"errors"
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

type fakeBox struct {
	err       error
	destroyed *int
}

func (f fakeBox) Destroy(context.Context) error { *f.destroyed++; return f.err }

func TestDestroyAllTriesEveryBoxAndJoinsFailures(t *testing.T) {
	var n int
	boom, bang := errors.New("boom"), errors.New("bang")
	err := DestroyAll(context.Background(), []fakeBox{{boom, &n}, {nil, &n}, {bang, &n}})
	if n != 3 || !errors.Is(err, boom) || !errors.Is(err, bang) {
		t.Fatalf("destroyed %d, err %v; want 3 and both failures", n, err)
	}
	if err := DestroyAll(context.Background(), []fakeBox{{nil, &n}}); err != nil {
		t.Fatal(err)
	}
}
