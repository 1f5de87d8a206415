package egress

import (
	"container/list"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// The files of a CA made by LoadOrCreateCA, in its directory.
const (
	CACertFile = "egress-ca.pem" // the certificate, 0644: public
	CAKeyFile  = "egress-ca.key" // the private key, 0600
)

// Leaf certificate bounds.
const (
	// DefaultLeafCache is how many leaf certificates a CA keeps (least
	// recently used dropped first), for all sandboxes together.
	DefaultLeafCache = 1024
	// leafLifetime is a leaf's validity; a cached leaf is made anew once
	// half of it has passed.
	leafLifetime = 7 * 24 * time.Hour
	caLifetime   = 10 * 365 * 24 * time.Hour
)

// CA is the daemon's interception authority: an ECDSA P-256 certificate
// authority that signs, for hosts whose TLS the broker terminates, leaf
// certificates every sandbox trusts. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	leafKey *ecdsa.PrivateKey // one key for every leaf: signing is the only per-host cost

	mu    sync.Mutex
	max   int
	order *list.List               // of *leafEntry, most recent first
	cache map[string]*list.Element // host -> element
}

type leafEntry struct {
	host    string
	cert    *tls.Certificate
	renewAt time.Time
}

// NewCA makes a CA held in memory only (tests).
func NewCA() (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := selfSign(key)
	if err != nil {
		return nil, err
	}
	return newCA(der, key)
}

// LoadOrCreateCA reads the CA in dir (CACertFile, CAKeyFile), or makes one
// there if neither file exists. The key file must be the current user's
// and not readable by others.
func LoadOrCreateCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile)
	certPEM, cerr := os.ReadFile(certPath)
	keyPEM, kerr := os.ReadFile(keyPath)
	switch {
	case errors.Is(cerr, os.ErrNotExist) && errors.Is(kerr, os.ErrNotExist):
		return createCA(certPath, keyPath)
	case cerr != nil:
		return nil, fmt.Errorf("egress CA: %w", cerr)
	case kerr != nil:
		return nil, fmt.Errorf("egress CA: %w", kerr)
	}
	st, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("egress CA: key file %s is accessible by other users (mode %04o); chmod 600 it", keyPath, st.Mode().Perm())
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || cb.Type != "CERTIFICATE" || kb == nil || kb.Type != "EC PRIVATE KEY" {
		return nil, fmt.Errorf("egress CA: %s or %s is not PEM of the expected type", certPath, keyPath)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return newCA(cb.Bytes, key)
}

func createCA(certPath, keyPath string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := selfSign(key)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	// The key first: a certificate without its key is refused at the next
	// start, rather than silently replaced.
	if err := writeFileAtomic(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if err := writeFileAtomic(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	return newCA(der, key)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, mode)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

func selfSign(key *ecdsa.PrivateKey) ([]byte, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "IronClaw egress CA " + host, Organization: []string{"IronClaw"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
}

func newCA(der []byte, key *ecdsa.PrivateKey) (*CA, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress CA: %w", err)
	}
	if !cert.IsCA {
		return nil, errors.New("egress CA: the certificate is not a CA")
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, errors.New("egress CA: the key does not match the certificate")
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, leafKey: leafKey, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		max: DefaultLeafCache, order: list.New(), cache: map[string]*list.Element{}}, nil
}

// CertPEM is the CA's certificate, PEM-encoded: what sandboxes trust.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// Certificate is the CA's certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// SetLeafCacheSize bounds the leaf cache (n > 0; tests).
func (c *CA) SetLeafCacheSize(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n > 0 {
		c.max = n
	}
	c.trim()
}

// LeafCacheLen is how many leaves are cached.
func (c *CA) LeafCacheLen() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *CA) trim() {
	for c.order.Len() > c.max {
		e := c.order.Back()
		c.order.Remove(e)
		delete(c.cache, e.Value.(*leafEntry).host)
	}
}

// Leaf returns a certificate for host (a normalised name or IP literal),
// from the cache or newly signed.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := time.Now()
	c.mu.Lock()
	if e, ok := c.cache[host]; ok {
		le := e.Value.(*leafEntry)
		if now.Before(le.renewAt) {
			c.order.MoveToFront(e)
			c.mu.Unlock()
			return le.cert, nil
		}
		c.order.Remove(e)
		delete(c.cache, host)
	}
	c.mu.Unlock()

	cert, err := c.sign(host, now)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.cache[host]; ok { // signed concurrently: keep one
		c.order.MoveToFront(e)
		return e.Value.(*leafEntry).cert, nil
	}
	c.cache[host] = c.order.PushFront(&leafEntry{host: host, cert: cert, renewAt: now.Add(leafLifetime / 2)})
	c.trim()
	return cert, nil
}

func (c *CA) sign(host string, now time.Time) (*tls.Certificate, error) {
	sum := sha256.Sum256([]byte(host + now.String()))
	serial := new(big.Int).SetBytes(sum[:16])
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &c.leafKey.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("egress CA: sign %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: c.leafKey, Leaf: leaf}, nil
}

// UpstreamRoots is the pool the broker verifies upstream servers against:
// the system's roots and the PEM certificates in files (serve
// --egress-trust-ca).
func UpstreamRoots(files ...string) (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("egress trust CA: %w", err)
		}
		if !pool.AppendCertsFromPEM(data) {
			return nil, fmt.Errorf("egress trust CA: %s holds no PEM certificate", f)
		}
	}
	return pool, nil
}
