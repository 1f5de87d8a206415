//go:build cgo

package landlock

// cgoLinked: with cgo enabled the test binary links runtime/cgo (through
// package net), so syscall.AllThreadsSyscall is unavailable.
const cgoLinked = true
