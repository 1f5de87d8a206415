package wire

// MaxGatePrograms bounds the gated programs of one sandbox (the real files
// pid 1 receives beside one message).
const MaxGatePrograms = 64

// GateProgram is one gated program of the sandbox's root (see package
// gate): its approval keys and every in-sandbox path its stub covers.
//
// The native init gets it in Config.Gate: it opens the file at Paths[0]
// before anything covers it, checks it is the file the daemon resolved
// (Dev, Ino), and mounts Stub over every one of Paths. The container
// agent gets it in GateHello, with the real file beside the message (the
// runtime has already bound the stubs); Dev, Ino and Stub are then unset.
type GateProgram struct {
	Keys  []string `json:"keys"`
	Paths []string `json:"paths"`
	Dev   uint64   `json:"dev,omitempty"`
	Ino   uint64   `json:"ino,omitempty"`
	// Stub is the program that answers in the real one's place (gate.Stub).
	Stub []byte `json:"stub,omitempty"`
}
