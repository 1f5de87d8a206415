// Command sleep waits until it is told to stop. bench/run.sh keeps one
// container running it so that "exec into a running sandbox" can be timed.
//
// It waits for a signal rather than sleeping: as pid 1 of a container it
// gets no default signal handling, so SIGTERM (docker stop, runc kill) would
// otherwise be ignored. A program that only blocked (select {}) would also be
// killed by Go's deadlock detector.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	<-c
}
