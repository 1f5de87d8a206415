package envd

import "net/http"

// registerProcess mounts the process.Process service.
func registerProcess(mux *http.ServeMux, cfg Config) {}
