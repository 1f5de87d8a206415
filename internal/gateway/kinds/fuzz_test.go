package kinds

import (
	"testing"

	"github.com/ironclaw/ironclaw/internal/textsafe"
)

// Whatever bytes come in, Decode does not panic, and what it accepts
// encodes canonically to data that decodes to the same display, with a
// summary that is one printable line.
func FuzzDecode(f *testing.F) {
	for _, s := range []struct{ kind, data string }{
		{KindEgressHost, `{"host":"a.example","port":443}`},
		{KindSandboxWiden, `{"egress_allow":["a.example:443"],"limits":{"memory":"1G","ttl":"2h"}}`},
		{KindToolRegister, `{"name":"lint","description":"d","input_schema":{"type":"object"}}`},
		{KindAgentSpawn, `{"argv":["x"],"env":{"A":"b"},"labels":{"k":"v"}}`},
		{KindExecCommand, `{"argv":["curl","\u001b"],"mode":"exec"}`},
		{KindToolCall, `{"tool":"t","input":{"a":[1,{"b":null}]}}`},
		{KindToolCall, `{"tool":"t","TOOL":"u"}`},
	} {
		f.Add(s.kind, []byte(s.data))
	}
	f.Fuzz(func(t *testing.T, kind string, data []byte) {
		p, err := Decode(kind, data)
		if err != nil {
			return
		}
		enc, err := Encode(p)
		if err != nil {
			t.Fatalf("accepted %s but cannot encode it: %v", data, err)
		}
		again, err := Decode(kind, enc)
		if err != nil {
			t.Fatalf("canonical %s of %s does not decode: %v", enc, data, err)
		}
		tgt := Target{Session: "sbx-1"}
		if fieldsText(p.Fields(tgt)) != fieldsText(again.Fields(tgt)) {
			t.Fatalf("%s and its canonical %s show differently", data, enc)
		}
		if err := textsafe.Check("summary", p.Summary(tgt)); err != nil {
			t.Fatalf("summary of %s: %v", data, err)
		}
	})
}
