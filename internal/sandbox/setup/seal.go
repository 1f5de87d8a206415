package setup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/ironclaw/ironclaw/internal/landlock"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
	"github.com/ironclaw/ironclaw/internal/seccomp"
)

// ErrNeedsGoInit is returned by Supports, and so by Compile, for a
// sandbox only the Go init can make: one with gated programs (the gate
// table is Go's).
var ErrNeedsGoInit = errors.New("setup: this sandbox needs the Go init")

// Supports says whether the C init can make the sandbox of cfg: nil, or
// an error wrapping ErrNeedsGoInit. The daemon asks before it picks the
// init to start, so that a sandbox the C init cannot make gets the Go
// init instead of a failed create.
func Supports(cfg *wire.Config) error {
	if len(cfg.Gate) > 0 {
		return fmt.Errorf("%w: gated programs", ErrNeedsGoInit)
	}
	return nil
}

// A Compiler compiles plans for the C init on one kernel. What is the
// same for every sandbox of the kernel (its landlock ABI, the seccomp
// program) is worked out once, in NewCompiler, not on every create.
type Compiler struct {
	abi    int
	filter string // the seccomp program, encoded for OpSeccomp
}

// NewCompiler is a Compiler for a kernel whose landlock ABI is abi (0:
// none).
func NewCompiler(abi int) (*Compiler, error) {
	if abi < 0 {
		return nil, fmt.Errorf("setup: landlock ABI %d", abi)
	}
	prog, err := seccomp.Program()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, 8*len(prog))
	for _, ins := range prog {
		b = binary.NativeEndian.AppendUint16(b, ins.Code)
		b = append(b, ins.Jt, ins.Jf)
		b = binary.NativeEndian.AppendUint32(b, ins.K)
	}
	return &Compiler{abi: abi, filter: string(b)}, nil
}

// Compile is the whole plan of cfg for the C init: its root, sent with
// trees mount trees, and its seal.
func (c *Compiler) Compile(cfg *wire.Config, trees int) (*Plan, error) {
	if err := Supports(cfg); err != nil {
		return nil, err
	}
	root, err := Root(cfg, trees)
	if err != nil {
		return nil, err
	}
	s, err := c.Seal(cfg)
	if err != nil {
		return nil, err
	}
	return &Plan{Trees: trees, Root: root, Seal: s}, nil
}

// Seal compiles the seal of cfg for an init that is one thread and no Go
// runtime (the C init). The Go init applies the same seal itself (boot's
// applySeal): rlimits, the bounding set, the identity, every capability,
// no_new_privs, not dumpable, the death signal, landlock with pid 1's two
// programs, and seccomp last.
func (c *Compiler) Seal(cfg *wire.Config) ([]Step, error) {
	sl := &cfg.Seal
	if len(sl.Capabilities) != 0 || !sl.NoNewPrivs {
		return nil, errors.New("the native init only seals: no capability, and no_new_privs")
	}
	var steps []Step
	for _, rl := range sl.Rlimits {
		res, ok := Rlimits[rl.Name]
		if !ok {
			return nil, fmt.Errorf("rlimit %s: not known to the native init", rl.Name)
		}
		steps = append(steps, Step{Op: OpRlimit, Slot: int32(res), Flags: rl.Value})
	}
	if sl.UID < 0 || sl.GID < 0 {
		return nil, fmt.Errorf("bad sandbox identity %d:%d", sl.UID, sl.GID)
	}
	steps = append(steps, Step{Op: OpIdentity, Flags: uint64(sl.UID), Attr: uint64(sl.GID)})
	if c.abi == 0 && cfg.RequireLandlock {
		return nil, errors.New("landlock is required but this kernel does not provide it")
	}
	if c.abi > 0 {
		rs, _, err := landlock.Prepare(sl.Landlock, c.abi)
		if err != nil {
			return nil, fmt.Errorf("landlock: %w", err)
		}
		steps = append(steps, Step{Op: OpLandlock, Flags: rs.HandledFS, Attr: rs.HandledNet, Mode: uint32(rs.Scoped), Slot: int32(rs.AttrSize)})
		for _, p := range rs.Paths {
			steps = append(steps, Step{Op: OpLandlockPath, Path: p.Path, Flags: p.Dir, Attr: p.File})
		}
		for _, p := range rs.Ports {
			steps = append(steps, Step{Op: OpLandlockPort, Flags: uint64(p.Port), Attr: p.Access})
		}
		steps = append(steps, Step{Op: OpLandlockExec, Flags: rs.ExecFile})
	}
	return append(steps, Step{Op: OpSeccomp, Data: c.filter}), nil
}

// Magic opens an encoded plan; the C init refuses anything else. It names
// the encoding's version: change it with the encoding.
const Magic = "ironclaw-setup 1\n"

// Flags of an encoded plan's header.
const (
	// FlagWorkloadTasks: the last descriptor beside the plan is the pids
	// cgroup's workload tasks file (wire.Config.WorkloadTasks).
	FlagWorkloadTasks = 1 << 0
	// FlagWorkloadRequired: a command is queued behind the plan, so the
	// init's move into the workload tasks file must succeed; if refused
	// the init fails with code CodeWorkloadRefused instead of leaving
	// the move to the daemon after it is ready (which would come after
	// the queued command had started).
	FlagWorkloadRequired = 1 << 1
)

// CodeWorkloadRefused is the code of the init's failure under
// FlagWorkloadRequired.
const CodeWorkloadRefused = "workload"

// Encode writes p for the C init, with header flags: Magic, then the
// number of trees, the flags and the number of steps (uint32 each), then
// each step as its op (uint8, then three zero bytes), Slot (int32), Mode
// (uint32), Flags and Attr (uint64), and Path, Source, FSType and Data,
// each a uint32 length, the bytes and a NUL; all in native byte order
// (the daemon and pid 1 share one machine). Only Data may hold a NUL.
func Encode(p *Plan, flags uint32) ([]byte, error) {
	steps := append(append([]Step(nil), p.Root...), p.Seal...)
	b := append([]byte(nil), Magic...)
	b = binary.NativeEndian.AppendUint32(b, uint32(p.Trees))
	b = binary.NativeEndian.AppendUint32(b, flags)
	b = binary.NativeEndian.AppendUint32(b, uint32(len(steps)))
	for _, s := range steps {
		b = append(b, byte(s.Op), 0, 0, 0)
		b = binary.NativeEndian.AppendUint32(b, uint32(s.Slot))
		b = binary.NativeEndian.AppendUint32(b, s.Mode)
		b = binary.NativeEndian.AppendUint64(b, s.Flags)
		b = binary.NativeEndian.AppendUint64(b, s.Attr)
		for i, str := range []string{s.Path, s.Source, s.FSType, s.Data} {
			if i < 3 && strings.IndexByte(str, 0) >= 0 {
				return nil, fmt.Errorf("setup: step %d: a NUL in a name", s.Op)
			}
			b = binary.NativeEndian.AppendUint32(b, uint32(len(str)))
			b = append(b, str...)
			b = append(b, 0)
		}
	}
	if len(b) > wire.MaxPacket {
		return nil, fmt.Errorf("setup: the plan is %d bytes, over the %d-byte packet limit", len(b), wire.MaxPacket)
	}
	return b, nil
}
