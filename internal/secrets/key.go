package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/ironclaw/ironclaw/internal/defaults"
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
// other than its owner may access (mode & 0o077 != 0).
func LoadKey(path string) (*Key, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link; give the file itself", ErrKey, path)
		}
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrKey, path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: %s is accessible to other users (mode %04o); chmod 600 it (and consider the secrets compromised)", ErrKey, path, st.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	raw, err := hex.DecodeString(strings.TrimSpace(string(b)))
	if err != nil || len(raw) != KeySize {
		return nil, fmt.Errorf("%w: %s does not hold a key (%d hex digits on one line)", ErrKey, path, 2*KeySize)
	}
	return NewKey(raw)
}

// EnsureKey loads the key file at path, creating it with a new random key
// (mode 0600; missing directories 0700) if it does not exist. The file is
// written under a temporary name and linked into place, so it never exists
// half-written and an existing one is never replaced.
func EnsureKey(path string) (k *Key, created bool, err error) {
	k, err = LoadKey(path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return k, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, false, fmt.Errorf("secrets key: %w", err)
	}
	var raw [KeySize]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, false, err
	}
	tmp, err := os.CreateTemp(dir, ".secrets-key-*")
	if err != nil {
		return nil, false, fmt.Errorf("secrets key: %w", err)
	}
	defer os.Remove(tmp.Name())
	werr := tmp.Chmod(0o600)
	if werr == nil {
		_, werr = tmp.WriteString(hex.EncodeToString(raw[:]) + "\n")
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return nil, false, fmt.Errorf("secrets key: %w", werr)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) {
			k, err := LoadKey(path)
			return k, false, err
		}
		return nil, false, fmt.Errorf("secrets key: %w", err)
	}
	syncDir(dir)
	k, err = NewKey(raw[:])
	return k, true, err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
