// Package int80 holds test-only ways of entering the kernel that Go's
// syscall packages do not offer. The seccomp and sandbox tests use it to show that the
// filter's architecture guard kills calls made through a foreign ABI.
// Nothing but tests should import it.
package int80

import "runtime"

// HasInt80 reports whether [Int80] can be called on this architecture.
const HasInt80 = runtime.GOARCH == "amd64"
