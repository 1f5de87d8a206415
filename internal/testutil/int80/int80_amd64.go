package int80

// Int80 enters the kernel through the i386 compatibility gate, int $0x80,
// with eax = nr and all argument registers zero, and returns eax. The kernel
// treats the call as AUDIT_ARCH_I386 and looks nr up in the i386 table.
//
// Without a filter, with IA32 emulation enabled, the call runs (i386 numbers
// with zero arguments are harmless for the numbers the tests use); with IA32
// emulation disabled the process takes SIGSEGV.
func Int80(nr uintptr) uintptr
