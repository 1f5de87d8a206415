// Package leakcheck fails a package's tests when goroutines they started
// are still running after the last test: a goroutine left behind is a
// server not closed, a stream not drained, a waiter never woken, and in
// the daemon each one holds memory, descriptors or a sandbox for as long
// as it runs. It is go.uber.org/goleak's TestMain check, which compares
// the stacks of the goroutines left with those the runtime and the
// testing package run themselves.
//
// Use it as the last call of a package's TestMain, in place of
// os.Exit(m.Run()):
//
//	func TestMain(m *testing.M) {
//		if boot.IsInit() {
//			boot.Main()
//		}
//		leakcheck.Main(m)
//	}
//
// The check runs only when every test passed (a failing test often leaves
// goroutines behind, and its own failure is the news), and it waits a
// little for goroutines that are already on their way out. Its report
// lists each leaked goroutine's stack: the function that started it
// ("created by") says where to look.
//
// Tests only.
package leakcheck

import "go.uber.org/goleak"

// M is what Main needs of a *testing.M.
type M interface{ Run() int }

// Main runs the package's tests, then fails the run (exit status 1) if
// goroutines they started are still running; it does not return. ignore
// adds goleak options for goroutines that are meant to outlive the tests
// (say why next to each).
func Main(m M, ignore ...goleak.Option) {
	goleak.VerifyTestMain(m, append(processWide(), ignore...)...)
}

// processWide are goroutines that live as long as the process by design,
// started by libraries on first use, never by one test.
func processWide() []goleak.Option {
	return []goleak.Option{
		// The native runtime starts every sandbox init from one locked OS
		// thread that it keeps for the life of the process (the kernel's
		// parent-death signal follows the thread that forked, see
		// native.spawner); Runtime.Close does not end it. One per
		// Runtime: the daemon has one, tests make many.
		goleak.IgnoreTopFunction("github.com/ironclaw/ironclaw/internal/sandbox/native.(*spawner).serve"),
	}
}
