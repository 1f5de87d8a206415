package tools

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ironclaw/ironclaw/internal/store"
)

func TestValidate(t *testing.T) {
	ok := Tool{Name: "lint", Description: "run the linter", InputSchema: json.RawMessage(`{"type":"object"}`), Command: "eslint ."}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, bad := range map[string]Tool{
		"empty name":      {},
		"name with slash": {Name: "a/b"},
		"leading digit":   {Name: "1x"},
		"long name":       {Name: strings.Repeat("a", 65)},
		"schema array":    {Name: "x", InputSchema: json.RawMessage(`[1]`)},
		"schema null":     {Name: "x", InputSchema: json.RawMessage(`null`)},
		"long command":    {Name: "x", Command: strings.Repeat("a", 4097)},
	} {
		if err := bad.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRegisterAndList(t *testing.T) {
	st, err := store.Open(context.Background(), filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := New(st)
	ctx := context.Background()
	if _, err := r.Register(ctx, Tool{Name: "b", Description: "one"}, "apr-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, Tool{Name: "a"}, "apr-2"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, Tool{Name: "b", Description: "two"}, "apr-3"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(ctx, Tool{Name: "bad name"}, "apr-4"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid tool: %v", err)
	}
	list, err := r.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "a" || list[1].Description != "two" || list[1].Approval != "apr-3" {
		t.Fatalf("list: %+v", list)
	}
}
