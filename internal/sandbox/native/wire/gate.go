package wire

// GateProgram is one gated program of the sandbox's root (see package
// gate): the init opens the file at Paths[0] before anything covers it,
// checks it is the file the daemon resolved (Dev, Ino), and mounts the
// stub for Keys[0] over every one of Paths.
type GateProgram struct {
	Keys  []string `json:"keys"`
	Paths []string `json:"paths"`
	Dev   uint64   `json:"dev"`
	Ino   uint64   `json:"ino"`
}
