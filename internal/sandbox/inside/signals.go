package inside

import (
	"syscall"
	"unsafe"
)

// resetIgnoredSignals gives every signal this process inherited as
// ignored its default action back, before the in-sandbox program starts
// anything. Ignored dispositions survive fork and execve, so without this
// whatever ignored a signal above the daemon (nohup ignores SIGHUP; GNU
// make 4.3 leaves the real-time signals 32 and 33 ignored in everything it
// starts) would reach every command in every sandbox, unlike a fresh
// process. The Go runtime installs no handler for a signal it found
// ignored (and never for 32 and 33, which belong to the C library), so it
// resets none of them in the children it forks; handlers it did install
// are left alone here.
func resetIgnoredSignals() {
	for sig := uintptr(1); sig <= 64; sig++ {
		if sig == uintptr(syscall.SIGKILL) || sig == uintptr(syscall.SIGSTOP) {
			continue
		}
		// The kernel's struct sigaction starts with the handler on every
		// architecture; the rest of a zeroed one is no flags and no mask.
		var old, dfl [4]uint64
		if _, _, e := syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 {
			continue
		}
		if old[0] == 1 { // SIG_IGN
			syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
		}
	}
}
