package daemon

import (
	"crypto/x509"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/secrets/inject"
	"github.com/lizard-build/lizard/internal/store"
)

// secretsFlags say where the secrets key is (docs/secrets.md), and which
// roots besides the host's the node trusts upstream of the requests it
// injects secrets into.
type secretsFlags struct {
	KeyFile    string
	ExtraRoots string
}

func (f *secretsFlags) register(fs *flag.FlagSet, role string) {
	def := "none: the secrets API answers 503"
	switch role {
	case "serve":
		def = "DATA/" + secrets.KeyFile + ", made (0600) on first start"
	case "node":
		def = "none: requests whose policy injects a secret are refused"
	}
	fs.StringVar(&f.KeyFile, "secrets-key-file", "", "file holding the key that seals projects' secrets, 32 random bytes in base64 (head -c 32 /dev/urandom | base64); every api process and every node that injects secrets needs the same one (default: env "+secrets.KeyEnv+", else "+def+")")
	if role != "api" {
		fs.StringVar(&f.ExtraRoots, "egress-extra-roots", "", "PEM file of certificate authorities trusted, besides the host's, when verifying the upstream of a request a secret is injected into (a private or test CA); verification is never skipped")
	}
}

// key loads the secrets key: the flag's file, else the environment's,
// else (make) DATA/secrets.key made on first start; nil if none.
func (f *secretsFlags) key(dataDir string, make bool) (*secrets.Key, error) {
	switch {
	case f.KeyFile != "":
		return secrets.LoadKey(f.KeyFile)
	case os.Getenv(secrets.KeyEnv) != "":
		k, err := secrets.ParseKey(os.Getenv(secrets.KeyEnv))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", secrets.KeyEnv, err)
		}
		return k, nil
	case make:
		return secrets.LoadOrCreateKey(filepath.Join(dataDir, secrets.KeyFile))
	}
	return nil, nil
}

// roots are the host's roots and --egress-extra-roots'.
func (f *secretsFlags) roots() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil {
		return nil, fmt.Errorf("loading the host's certificate authorities: %w", err)
	}
	if f.ExtraRoots == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(f.ExtraRoots)
	if err != nil {
		return nil, fmt.Errorf("--egress-extra-roots: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--egress-extra-roots %s: no PEM certificate in it", f.ExtraRoots)
	}
	return pool, nil
}

// secretStore is the secrets of st sealed with key (nil: the API
// answers 503 and nothing is injected).
func secretStore(st *store.Store, key *secrets.Key) *secrets.Store {
	return &secrets.Store{Store: st, Key: key}
}

// injector is a node's egress Interceptor (docs/secrets.md): secrets
// opened with key and audited to audit, each sandbox's CA under
// DATA/egress-ca, upstreams verified against the host's roots and
// --egress-extra-roots.
func (f *secretsFlags) injector(st *store.Store, key *secrets.Key, dataDir string, audit, logger *slog.Logger) (*inject.Injector, error) {
	roots, err := f.roots()
	if err != nil {
		return nil, err
	}
	sec := secretStore(st, key)
	sec.Audit = audit
	return &inject.Injector{Secrets: sec, Authorities: &inject.Authorities{Dir: filepath.Join(dataDir, "egress-ca")},
		Roots: roots, Logger: logger}, nil
}
