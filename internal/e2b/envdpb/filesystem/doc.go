// Package filesystem is the Go code protoc generates from api/e2b/filesystem/filesystem.proto,
// the messages of E2B's envd filesystem service (make e2b-proto; not edited by
// hand).
package filesystem
