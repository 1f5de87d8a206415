package native

import (
	"os"
	"testing"

	"github.com/ironclaw/ironclaw/internal/rootfs"
)

// warm makes the shared mount ahead of the first clone, which then uses
// it as it is; after close, warm makes nothing (New's warm-up may finish
// after a short-lived runtime has closed).
func TestSharedAlternativesWarm(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("IRONCLAW_REQUIRE_SANDBOX") == "1" {
			t.Fatal("the shared alternatives mount needs root")
		}
		t.Skip("the shared alternatives mount needs root")
	}
	links := []rootfs.Entry{
		{Path: "/etc/alternatives/editor", Kind: rootfs.KindSymlink, Target: "/usr/bin/vi"},
		{Path: "/etc/alternatives/pager", Kind: rootfs.KindSymlink, Target: "/usr/bin/less"},
	}
	s := newSharedAlternatives()
	s.warm(links)
	if s.fd < 0 {
		t.Fatal("warm made no mount")
	}
	made := s.fd
	s.warm(links)
	if s.fd != made {
		t.Fatal("a second warm of the same links made another mount")
	}
	c := s.clone(links, t.Logf)
	if c == nil {
		t.Fatal("no clone of the warmed mount")
	}
	c.Close()
	if s.fd != made {
		t.Fatal("clone made its own mount instead of using the warmed one")
	}
	s.close()
	if s.fd != -1 {
		t.Fatal("close kept the mount")
	}
	s.warm(links)
	if s.fd != -1 {
		t.Fatal("warm after close made a mount that nothing would close")
	}
}
