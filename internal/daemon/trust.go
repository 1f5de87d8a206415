package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/ironclaw/ironclaw/internal/egress"
	"github.com/ironclaw/ironclaw/internal/sandbox"
)

// TrustDirName is the directory in the data dir holding the files every
// sandbox sees at sandbox.TrustDir.
const TrustDirName = "egress-trust"

// systemBundles are where hosts keep their CA bundle, in the order Go's
// crypto/x509 looks (root_linux.go); $SSL_CERT_FILE first.
var systemBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",                // Debian/Ubuntu/Gentoo etc.
	"/etc/pki/tls/certs/ca-bundle.crt",                  // Fedora/RHEL 6
	"/etc/ssl/ca-bundle.pem",                            // OpenSUSE
	"/etc/pki/tls/cacert.pem",                           // OpenELEC
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", // CentOS/RHEL 7
	"/etc/ssl/cert.pem",                                 // Alpine Linux
}

// maxSystemBundle bounds the host bundle copied into the trust files.
const maxSystemBundle = sandbox.MaxTrustFileBytes - 64<<10

// egressTrust loads (or makes, on the first start) the daemon's egress CA
// in the data dir (egress.CACertFile, 0644, and egress.CAKeyFile, 0600:
// the data dir's custody, like the tokens) and writes the trust files
// every sandbox sees: the host's system bundle followed by the CA
// (sandbox.TrustBundle) and the CA alone (sandbox.TrustCA). It returns
// the CA and the trust directory.
func egressTrust(dataDir string, logf func(string, ...any)) (*egress.CA, string, error) {
	ca, err := egress.LoadOrCreateCA(dataDir)
	if err != nil {
		return nil, "", err
	}
	sys, from := systemBundle()
	if from == "" && logf != nil {
		logf("egress: no system CA bundle found on this host; sandboxes trust only the egress CA")
	}
	bundle := append(append(bytes.TrimRight(sys, "\n"), '\n'), []byte("# IronClaw egress CA\n")...)
	if len(sys) == 0 {
		bundle = []byte("# IronClaw egress CA\n")
	}
	bundle = append(bundle, ca.CertPEM()...)
	dir := filepath.Join(dataDir, TrustDirName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("egress trust: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, "", fmt.Errorf("egress trust: %w", err)
	}
	for name, data := range map[string][]byte{path.Base(sandbox.TrustBundle): bundle, path.Base(sandbox.TrustCA): ca.CertPEM()} {
		if err := writeTrustFile(filepath.Join(dir, name), data); err != nil {
			return nil, "", fmt.Errorf("egress trust: %w", err)
		}
	}
	return ca, dir, nil
}

// systemBundle reads the host's CA bundle (bounded) and says from where.
func systemBundle() ([]byte, string) {
	paths := systemBundles
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		paths = append([]string{f}, paths...)
	}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil || !st.Mode().IsRegular() || st.Size() > maxSystemBundle {
			continue
		}
		data, err := os.ReadFile(p)
		if err == nil && len(data) > 0 && len(data) <= maxSystemBundle {
			return data, p
		}
	}
	return nil, ""
}

// writeTrustFile replaces a trust file atomically (a running sandbox that
// binds the directory never sees half a file), 0644: certificates are
// public.
func writeTrustFile(p string, data []byte) error {
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		return os.Chmod(p, 0o644)
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, p)
}
