package native

import (
	"os"

	"github.com/ironclaw/ironclaw/internal/cgroups"
)

// SetWorkloadTasksOpener replaces how r opens the tasks file its C inits
// move themselves into, for tests of a refused move.
func (r *Runtime) SetWorkloadTasksOpener(open func(*cgroups.Cgroup) (*os.File, error)) {
	r.openWorkloadTasks = open
}
