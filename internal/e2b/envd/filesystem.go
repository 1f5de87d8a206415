package envd

import "net/http"

// registerFilesystem mounts the filesystem.Filesystem service and /files.
func registerFilesystem(mux *http.ServeMux, cfg Config) {}
