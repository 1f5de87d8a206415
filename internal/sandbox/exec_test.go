package sandbox

import (
	"bytes"
	"context"
	"errors"
	"math"
	"testing"
	"time"
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

func TestCheckExecBackground(t *testing.T) {
	lim := Limits{Timeout: time.Second, OutputBytes: 100}
	for _, tc := range []struct {
		req     ExecRequest
		timeout time.Duration
		out     int64
	}{
		{ExecRequest{}, time.Second, 100},
		{ExecRequest{Timeout: time.Hour, OutputBytes: 1 << 20}, time.Second, 100},
		{ExecRequest{Timeout: time.Millisecond, OutputBytes: 10}, time.Millisecond, 10},
		{ExecRequest{Background: true}, 0, math.MaxInt64},
		{ExecRequest{Background: true, Timeout: time.Hour, OutputBytes: 1 << 20}, time.Hour, 1 << 20},
		{ExecRequest{Background: true, Timeout: -1, OutputBytes: -1}, 0, math.MaxInt64},
	} {
		tc.req.Argv = []string{"true"}
		p, err := CheckExec(tc.req, "/workspace", lim)
		if err != nil || p.Timeout != tc.timeout || p.OutputBytes != tc.out {
			t.Errorf("%+v: %+v, %v; want timeout %v output %d", tc.req, p, err, tc.timeout, tc.out)
		}
		c, stop := p.Deadline()
		if (c == nil) != (tc.timeout == 0) {
			t.Errorf("%+v: deadline channel %v", tc.req, c)
		}
		stop()
	}
	if _, err := CheckExec(ExecRequest{Background: true}, "/workspace", lim); !errors.Is(err, ErrInvalidRequest) {
		t.Errorf("empty background command: %v", err)
	}
}
