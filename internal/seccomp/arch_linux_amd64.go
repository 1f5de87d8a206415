package seccomp

import "golang.org/x/sys/unix"

func currentArch() (archSpec, error) {
	return archSpec{
		// int $0x80 and sysenter from 64-bit code arrive as
		// AUDIT_ARCH_I386 with i386 numbers; they are killed.
		auditArch:     unix.AUDIT_ARCH_X86_64,
		cloneFlagsArg: 0, // clone(flags, stack, parent_tid, child_tid, tls)
		denied: []sysname{
			{"iopl", unix.SYS_IOPL},
			{"ioperm", unix.SYS_IOPERM},
			// Obsolete; kept out so old kernels' implementations stay
			// unreachable.
			{"uselib", unix.SYS_USELIB},
			{"_sysctl", unix.SYS__SYSCTL},
			{"create_module", unix.SYS_CREATE_MODULE},
			{"get_kernel_syms", unix.SYS_GET_KERNEL_SYMS},
			{"query_module", unix.SYS_QUERY_MODULE},
		},
		restricted: []rule{
			{sysname: sysname{"mknod", unix.SYS_MKNOD}, action: retEPERM, match: deviceNode(1)},
		},
	}, nil
}
