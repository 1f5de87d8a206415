//go:build !cgo

package landlock

// cgoLinked: see cgo_on_test.go.
const cgoLinked = false
