// Package process is the Go code protoc generates from api/e2b/process/process.proto,
// the messages of E2B's envd process service (make e2b-proto; not edited by
// hand).
package process
