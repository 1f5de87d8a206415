package int80

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Works reports whether int $0x80 reaches the kernel's i386 table on this
// host, asked once per process outside any filter (i386 getpid, which is
// harmless). Where the gate faults instead (IA32 emulation disabled, or a
// hypervisor that has no i386 entry, as PVM guests), no process can make
// a foreign-ABI call at all, so there is nothing for a filter to stop and
// the tests that prove the filter kills one say so and skip.
var Works = sync.OnceValue(func() bool {
	if !HasInt80 {
		return false
	}
	done := make(chan bool)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		old := debug.SetPanicOnFault(true)
		defer debug.SetPanicOnFault(old)
		defer func() {
			if recover() != nil {
				done <- false
			}
		}()
		Int80(20) // getpid in the i386 table
		done <- true
	}()
	return <-done
})

// Refused is why a test of the foreign-ABI kill skips on this host, or ""
// when it can run.
func Refused() string {
	switch {
	case !HasInt80:
		return "int $0x80 exists on amd64 only"
	case !Works():
		return "int $0x80 faults on this host outside any sandbox (IA32 emulation off, or a hypervisor without the i386 entry): no process here can make the call a filter would have to stop"
	}
	return ""
}
