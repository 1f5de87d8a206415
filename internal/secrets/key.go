package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/defaults"
	"github.com/ironclaw/ironclaw/internal/keyfile"
)

// KeySize is the length of the key (AES-256).
const KeySize = 32

// Key seals and opens values. It is safe for concurrent use.
type Key struct {
	aead cipher.AEAD
	id   string
}

// NewKey makes a Key of KeySize raw bytes.
func NewKey(raw []byte) (*Key, error) {
	if len(raw) != KeySize {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrKey, len(raw), KeySize)
	}
	block, err := aes.NewCipher(raw)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(append([]byte("ironclaw secrets key id\x00"), raw...))
	return &Key{aead: aead, id: hex.EncodeToString(sum[:8])}, nil
}

// ID names the key without revealing it (a truncated hash), so a secrets
// file sealed under another key is told apart from a damaged one.
func (k *Key) ID() string { return k.id }

// seal encrypts v with a fresh random nonce; ad is authenticated too.
func (k *Key) seal(v, ad []byte) (nonce, ct []byte, err error) {
	nonce = make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, nil, err
	}
	return nonce, k.aead.Seal(nil, nonce, v, ad), nil
}

func (k *Key) open(nonce, ct, ad []byte) ([]byte, error) {
	if len(nonce) != k.aead.NonceSize() {
		return nil, errors.New("bad nonce")
	}
	return k.aead.Open(nil, nonce, ct, ad)
}

// DefaultKeyFile is where the daemon keeps the secrets key unless told
// otherwise (serve --secrets-key-file): beside the audit key, in
// /etc/ironclaw as root, else $XDG_CONFIG_HOME/ironclaw: not the data
// directory, so its backups, copies and anyone who can write it do not
// hold the key.
func DefaultKeyFile() string {
	dir := "/etc/ironclaw"
	if os.Geteuid() != 0 {
		dir = defaults.UserDir("XDG_CONFIG_HOME", ".config")
	}
	return filepath.Join(dir, "secrets.key")
}

// LoadKey reads the key file at path: one line of 64 hex digits. It
// refuses a symbolic link, anything but a regular file, and a file users
// other than its owner may access (mode & 0o077 != 0); those refusals
// wrap ErrKey.
func LoadKey(path string) (*Key, error) {
	raw, err := keyfile.Load("secrets key", path, KeySize)
	if err != nil {
		return nil, keyErr(err)
	}
	return NewKey(raw)
}

// EnsureKey loads the key file at path, creating it with a new random key
// (mode 0600; missing directories 0700) if it does not exist. The file is
// written under a temporary name and linked into place, so it never exists
// half-written and an existing one is never replaced.
func EnsureKey(path string) (k *Key, created bool, err error) {
	raw, created, err := keyfile.Ensure("secrets key", path, KeySize)
	if err != nil {
		return nil, false, keyErr(err)
	}
	k, err = NewKey(raw)
	return k, created, err
}

// keyErr classifies a refused key file as ErrKey.
func keyErr(err error) error {
	if errors.Is(err, keyfile.ErrUnsafe) {
		return fmt.Errorf("%w: %w", ErrKey, err)
	}
	return err
}
