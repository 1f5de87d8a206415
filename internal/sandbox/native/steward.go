package native

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"

	"github.com/ironclaw/ironclaw/internal/sandbox"
	"github.com/ironclaw/ironclaw/internal/sandbox/wire"
)

// stewardSection is the ELF section the steward holds its protocol
// marker in (csrc/steward.c).
const stewardSection = ".ironclaw.protocol"

// openSteward opens the steward binary (Options.Steward) once for the
// runtime's life: every sandbox gets this descriptor beside its Config
// (wire.Config.Steward), so a later change of the path cannot reach a
// sandbox half-way. Its stewardSection must hold wire.StewardProtocol,
// the handover and message format this build speaks; only the ELF
// headers and that section are read, so a one-shot `ironclaw run` pays
// for no more.
func openSteward(path string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: the sandbox steward: %v", sandbox.ErrUnsupported, err)
	}
	st, err := f.Stat()
	if err == nil && (!st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0) {
		err = fmt.Errorf("%s is not an executable file", path)
	}
	if err == nil {
		err = checkStewardProtocol(f, path)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%w: the sandbox steward: %v", sandbox.ErrUnsupported, err)
	}
	return f, nil
}

// CheckSteward says why path cannot be this build's steward, or nil.
func CheckSteward(path string) error {
	f, err := openSteward(path)
	if err != nil {
		return err
	}
	return f.Close()
}

func checkStewardProtocol(f *os.File, path string) error {
	ef, err := elf.NewFile(f)
	if err != nil {
		return fmt.Errorf("%s is not an ELF executable: %v", path, err)
	}
	sec := ef.Section(stewardSection)
	if sec == nil || sec.Size > 256 {
		return fmt.Errorf("%s is no steward (no %s section)", path, stewardSection)
	}
	b, err := sec.Data()
	if err != nil {
		return fmt.Errorf("%s: %v", path, err)
	}
	if got := string(bytes.TrimRight(b, "\x00")); got != wire.StewardProtocol {
		return fmt.Errorf("%s speaks %q, this build %q: build both with make build", path, got, wire.StewardProtocol)
	}
	return nil
}
