package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ironclaw/ironclaw/internal/audit"
	"github.com/ironclaw/ironclaw/internal/gateway"
	"github.com/ironclaw/ironclaw/internal/tools"
)

// fill sets every exported field of v (a pointer) to a value that is not
// zero, so that a conversion that forgets a field shows.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, *n, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(t, v.Field(i), n)
			}
		}
	case reflect.String:
		v.SetString("s" + string(rune('a'+*n%26)))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64, reflect.Int32:
		v.SetInt(int64(*n))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	case reflect.Slice:
		if v.Type() == reflect.TypeFor[json.RawMessage]() {
			v.SetBytes([]byte(`{"k":"<v>"}`))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		for i := range 2 {
			fill(t, v.Index(i), n)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(t, k, n)
		fill(t, e, n)
		m.SetMapIndex(k, e)
		v.Set(m)
	default:
		t.Fatalf("fill: %s", v.Type())
	}
}

func filled[T any](t *testing.T) T {
	var v T
	n := 0
	fill(t, reflect.ValueOf(&v).Elem(), &n)
	return v
}

// sameJSON reports whether a and b encode to the same JSON value.
func sameJSON(t *testing.T, a, b any) {
	t.Helper()
	ja, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	var va, vb any
	if err := json.Unmarshal(ja, &va); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(jb, &vb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(va, vb) {
		t.Errorf("%T encodes as\n%s\nits API form %T as\n%s", a, ja, b, jb)
	}
}

// Each domain object the API converts keeps every field in its API form:
// the API's approval is the webhook's, its audit record the export's.
func TestViewsKeepEveryField(t *testing.T) {
	a := filled[gateway.Approval](t)
	sameJSON(t, a, approvalView(a))
	tool := filled[tools.Tool](t)
	sameJSON(t, tool, toolView(tool))
	res := filled[audit.Result](t)
	sameJSON(t, res, verificationView(res))

	rec := filled[audit.Record](t)
	sameJSON(t, rec, recordView(rec))
	// The record's bytes too, as the API writes them (json.Marshal of
	// either escapes HTML the same way).
	want, _ := json.Marshal(rec)
	got, _ := json.Marshal(recordView(rec))
	if !bytes.Equal(want, got) {
		t.Errorf("record: %s, want %s", got, want)
	}
	rec.Data = nil
	sameJSON(t, rec, recordView(rec))
}
