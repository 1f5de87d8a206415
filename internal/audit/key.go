package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/keyfile"
)

// KeySize is the length of an audit key in bytes.
const KeySize = 32

// macTag starts every MAC input, so a MAC of a record can never be taken
// for a MAC of anything else made with the same key.
const macTag = "ironclaw.audit.mac.v1"

// Key is the secret that authenticates the audit chain: every record
// carries mac = HMAC-SHA256(key, "ironclaw.audit.mac.v1" || seq as 8 bytes
// big-endian || hash as its 32 raw bytes), hex-encoded. The record's hash
// already covers its contents and, through prev_hash, every record before
// it, so a MAC over (seq, hash) authenticates the whole prefix: rewriting
// any record and recomputing the SHA-256 chain needs the key to recompute
// the MACs.
//
// A Key is immutable and safe for concurrent use. It is kept in a file
// outside the data directory (see DefaultKeyFile), so a copy of the data
// directory, or write access to it alone, is not enough to forge records.
type Key struct {
	raw [KeySize]byte
	id  string
}

// NewKey returns a Key holding raw, which must be KeySize bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("audit: a key is %d bytes, got %d", KeySize, len(raw))
	}
	k := &Key{}
	copy(k.raw[:], raw)
	sum := sha256.Sum256(append([]byte("ironclaw.audit.keyid.v1"), k.raw[:]...))
	k.id = hex.EncodeToString(sum[:8])
	return k, nil
}

// ID names the key without revealing it: 16 hex digits of a hash of it.
// Checkpoints and verify results carry it, so a verification with the wrong
// key file says so instead of looking like tampering.
func (k *Key) ID() string { return k.id }

// MAC returns the MAC of the record with this seq and hash (64 hex digits).
func (k *Key) MAC(seq int64, hashHex string) (string, error) {
	raw, err := decodeHash(hashHex)
	if err != nil {
		return "", err
	}
	m := k.newMacer()
	return m.sumHex(seq, &raw), nil
}

// macer computes MACs reusing one HMAC state.
type macer struct {
	h   hash.Hash
	buf [len(macTag) + 8 + sha256.Size]byte
	out [sha256.Size]byte
	hex [2 * sha256.Size]byte
}

func (k *Key) newMacer() *macer {
	m := &macer{h: hmac.New(sha256.New, k.raw[:])}
	copy(m.buf[:], macTag)
	return m
}

// sum returns the MAC of (seq, hash) as hex; the result is valid until the
// next call.
func (m *macer) sum(seq int64, hash *[sha256.Size]byte) []byte {
	binary.BigEndian.PutUint64(m.buf[len(macTag):], uint64(seq))
	copy(m.buf[len(macTag)+8:], hash[:])
	m.h.Reset()
	m.h.Write(m.buf[:])
	m.h.Sum(m.out[:0])
	hex.Encode(m.hex[:], m.out[:])
	return m.hex[:]
}

func (m *macer) sumHex(seq int64, hash *[sha256.Size]byte) string {
	return string(m.sum(seq, hash))
}

// DefaultKeyFile is where the daemon keeps its audit key unless told
// otherwise: /etc/ironclaw/audit.key when running as root, else
// $XDG_CONFIG_HOME/ironclaw/audit.key (~/.config/ironclaw/audit.key).
//
// The configuration tree is chosen because it is not the data directory
// (~/.local/share/ironclaw, /var/lib/...): it is not in the data
// directory's backups, volume mounts or copies, and a process or person
// that can write the data directory (the one place the daemon writes
// agent-influenced files into) does not thereby hold the key. It is not a
// defence against someone with the daemon's own uid on the same host; see
// the package documentation for what such an attacker can still do.
func DefaultKeyFile() string {
	return filepath.Join(configDir(), "audit.key")
}

func configDir() string {
	if os.Geteuid() == 0 {
		return "/etc/ironclaw"
	}
	return defaults.UserDir("XDG_CONFIG_HOME", ".config")
}

// LoadKey reads the key file at path: one line of 64 hex digits. It
// refuses a symlink, anything but a regular file (without blocking on a
// FIFO), and a file that users other than its owner may read or write
// (mode & 0o077 != 0), since anyone who can read it can forge records.
func LoadKey(path string) (*Key, error) {
	raw, err := keyfile.Load("audit key", path, KeySize)
	if err != nil {
		return nil, err
	}
	return NewKey(raw)
}

// EnsureKey loads the key file at path, creating it with a new random key
// (mode 0600; missing directories 0700) if it does not exist. created
// reports whether it did. Two processes racing to create the same file end
// up with the same key: the file is written under a temporary name and
// linked into place, so it never exists half-written and an existing one
// is never replaced.
func EnsureKey(path string) (k *Key, created bool, err error) {
	raw, created, err := keyfile.Ensure("audit key", path, KeySize)
	if err != nil {
		return nil, false, err
	}
	k, err = NewKey(raw)
	return k, created, err
}
