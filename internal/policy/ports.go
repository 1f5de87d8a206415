package policy

import (
	"fmt"
	"time"
)

// Ports is the ports section: inbound access, through the daemon, to
// servers that listen on a sandbox's loopback.
//
//	ports:
//	  inbound: true   # default false: no URL is issued and no port-forward opened
//	  url_ttl: 1h     # longest life of an issued URL (default 1h, at most 24h)
//
// Inbound never adds egress: a sandbox that serves a port reaches nothing
// new, and only the ports its create listed can be served at all.
type Ports struct {
	Inbound bool     `yaml:"inbound"`
	URLTTL  Duration `yaml:"url_ttl"`
}

// Default and longest URL lifetimes.
const (
	DefaultPortURLTTL = time.Hour
	MaxPortURLTTL     = 24 * time.Hour
)

func (p *Ports) validate() error {
	switch t := time.Duration(p.URLTTL); {
	case t == 0:
		p.URLTTL = Duration(DefaultPortURLTTL)
	case t < time.Second || t > MaxPortURLTTL:
		return fmt.Errorf("%w: ports.url_ttl %s must be between 1s and 24h", ErrInvalid, t)
	}
	return nil
}
