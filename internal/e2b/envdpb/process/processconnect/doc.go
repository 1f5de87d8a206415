// Package processconnect is the Connect RPC glue protoc-gen-connect-go
// generates for E2B's envd process service: the handler internal/e2b/envd
// serves and the client its tests use (make e2b-proto; not edited by hand).
package processconnect
