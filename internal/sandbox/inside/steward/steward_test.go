package steward

import (
	"bytes"
	"errors"
	"reflect"
	"testing"

	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

func TestHandoverRoundTrip(t *testing.T) {
	for _, h := range []*Handover{
		{Ctl: 3, Steward: 7, Agent: 8},
		{Ctl: 12, Steward: 5, Agent: 6, OOM: &OOM{FD: 9, Own: "-998", Workload: "500"},
			Runs: []Run{{Pid: 7, ID: 1}, {Pid: 32768, ID: 18446744073709551615}}},
	} {
		got, err := Parse(h.Args())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, h) {
			t.Fatalf("round trip: %+v, want %+v", got, h)
		}
	}
}

func TestHandoverRefusesWhatItCannotRead(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"ctl=3", "steward=4"},
		{"ctl=3", "steward=4", "agent=5", "extra"},
		{"ctl=3", "steward=4", "agent=5", "color=blue"},
		{"ctl=-1", "steward=4", "agent=5"},
		{"ctl=3", "steward=4", "agent=5", "run=0:1"},
		{"ctl=3", "steward=4", "agent=5", "run=7"},
		{"ctl=3", "steward=4", "agent=5", "run=7:-1"},
		{"ctl=3", "steward=4", "agent=5", "oom=9:x:500"},
		{"ctl=3", "steward=4", "agent=5", "oom=9:0"},
	} {
		if _, err := Parse(args); !errors.Is(err, ErrHandover) {
			t.Errorf("Parse(%q): %v, want ErrHandover", args, err)
		}
	}
}

// The C program and the daemon agree on the protocol's name: the marker
// in csrc/steward.c's section is wire.StewardProtocol.
func TestSourceNamesTheWireProtocol(t *testing.T) {
	want := []byte(`section(".ironclaw.protocol"))) = "` + wire.StewardProtocol + `";`)
	if !bytes.Contains(Source, want) {
		t.Fatalf("csrc/steward.c does not declare %s", want)
	}
	if !bytes.Contains(Source, []byte(`"`+ResumeArg0+`"`)) {
		t.Fatalf("csrc/steward.c does not resume the Go agent as %s", ResumeArg0)
	}
}
