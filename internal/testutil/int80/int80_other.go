//go:build !amd64

package int80

// Int80 exists only on amd64; see [HasInt80].
func Int80(nr uintptr) uintptr {
	panic("probe: int $0x80 exists only on amd64")
}
