//go:build !linux

package landlock

// ABI reports 0: Landlock is Linux-only.
func ABI() (int, error) { return 0, nil }

// Restrict enforces nothing outside Linux and says so in Status.Missing.
func Restrict(r Rules) (Status, error) {
	return Status{Missing: []string{"landlock is only available on Linux"}}, nil
}
