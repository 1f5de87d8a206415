// Command true exits 0 and does nothing else. bench/run.sh builds it static
// (CGO_ENABLED=0) and runs it through every peer, so that each peer pays the
// same workload: one exec of a small binary that needs no libraries, no /etc
// and no filesystem beyond itself.
package main

func main() {}
