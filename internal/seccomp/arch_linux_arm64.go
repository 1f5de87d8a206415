package seccomp

import "golang.org/x/sys/unix"

func currentArch() (archSpec, error) {
	return archSpec{
		// aarch32 compat tasks arrive as AUDIT_ARCH_ARM; they are killed.
		auditArch:     unix.AUDIT_ARCH_AARCH64,
		cloneFlagsArg: 0, // clone(flags, stack, parent_tid, tls, child_tid)
		// arm64 has none of iopl, ioperm, uselib, _sysctl, create_module,
		// get_kernel_syms or query_module.
	}, nil
}
