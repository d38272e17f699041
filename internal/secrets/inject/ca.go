package inject

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// Authority is one sandbox's certificate authority: the key stays on the
// host (in memory, and 0600 under the node's data directory so that it
// outlives a restart of the node); its certificate is what the sandbox
// trusts. Leaf certificates are minted per name and kept.
type Authority struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// leafLife is how long a minted leaf is good for; one is minted again a
// day before it ends.
const leafLife = 30 * 24 * time.Hour

func newAuthority(sandboxID string, now time.Time) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "Lizard egress CA " + sandboxID, Organization: []string{"Lizard sandbox " + sandboxID}},
		NotBefore:    now.Add(-time.Hour),
		// Longer than any sandbox lives, paused and resumed included.
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return authorityOf(der, key)
}

func authorityOf(der []byte, key *ecdsa.PrivateKey) (*Authority, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: map[string]*tls.Certificate{}}, nil
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// CertPEM is the certificate the sandbox trusts.
func (a *Authority) CertPEM() []byte { return a.certPEM }

// Leaf returns a certificate for name signed by a, minted on first use.
func (a *Authority) Leaf(name string, now time.Time) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[name]; ok && now.Before(c.Leaf.NotAfter.Add(-24*time.Hour)) {
		return c, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLife),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(name); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("minting a certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	a.leaves[name] = c
	return c, nil
}

// Authorities are the sandboxes' authorities of one node, under Dir
// (DATA/egress-ca/<sandbox>/ca.pem and ca.key, 0600, the directories
// 0700). Safe for concurrent use.
type Authorities struct {
	Dir string
	Now func() time.Time // default time.Now

	mu sync.Mutex
	m  map[string]*Authority
}

func (as *Authorities) now() time.Time {
	if as.Now != nil {
		return as.Now()
	}
	return time.Now()
}

// Get returns sandbox id's authority, loading it or making it on first
// use.
func (as *Authorities) Get(id string) (*Authority, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if a, ok := as.m[id]; ok {
		return a, nil
	}
	if as.m == nil {
		as.m = map[string]*Authority{}
	}
	dir := filepath.Join(as.Dir, id)
	a, err := load(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if a, err = newAuthority(id, as.now()); err == nil {
			err = save(dir, a)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the egress CA of sandbox %s: %w", id, err)
	}
	as.m[id] = a
	return a, nil
}

// Inherit gives sandbox id a copy of sandbox parent's authority, if
// parent has one: a fork's processes are its parent's, TLS contexts
// loaded with its CA included (Python's urllib keeps one for good), and
// must go on verifying the certificates the node shows the fork. The
// key goes to no sandbox either way.
func (as *Authorities) Inherit(id, parent string) error {
	as.mu.Lock()
	defer as.mu.Unlock()
	a, err := load(filepath.Join(as.Dir, parent))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = save(filepath.Join(as.Dir, id), a)
	}
	if err != nil {
		return fmt.Errorf("giving sandbox %s the egress CA of %s: %w", id, parent, err)
	}
	if as.m == nil {
		as.m = map[string]*Authority{}
	}
	as.m[id] = &Authority{cert: a.cert, key: a.key, certPEM: a.certPEM, leaves: map[string]*tls.Certificate{}}
	return nil
}

// Remove forgets sandbox id's authority and deletes its key: the sandbox
// has ended.
func (as *Authorities) Remove(id string) error {
	as.mu.Lock()
	delete(as.m, id)
	as.mu.Unlock()
	return os.RemoveAll(filepath.Join(as.Dir, id))
}

func load(dir string) (*Authority, error) {
	certPEM, err := os.ReadFile(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "ca.key"))
	if err != nil {
		return nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, fmt.Errorf("%s: not PEM", dir)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, err
	}
	return authorityOf(cb.Bytes, key)
}

func save(dir string, a *Authority) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	der, err := x509.MarshalECPrivateKey(a.key)
	if err != nil {
		return err
	}
	// The key first, and the certificate last: a directory with a
	// certificate has its key.
	if err := os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.pem"), a.certPEM, 0o600)
}
