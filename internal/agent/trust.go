package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/lizard-build/lizard/api"
)

// The egress CA (docs/secrets.md): when a sandbox's network policy injects
// secrets into its HTTPS requests, the node terminates their TLS with a
// certificate authority of this sandbox's own, which its code must trust.
// Its certificate (never its key) goes where the clients in a template
// look for roots: appended to the system bundle (OpenSSL: urllib, curl,
// Python's ssl) and to every certifi bundle of the template's Pythons
// (requests, httpx, pip), and in a file of its own named by
// NODE_EXTRA_CA_CERTS (Node reads no bundle but its own). The bundles are
// root's; code runs as the sandbox user and cannot change them.

// egressCAFile is the certificate alone, for NODE_EXTRA_CA_CERTS.
const egressCAFile = "/usr/local/share/ca-certificates/lizard-egress-ca.crt"

// The marks around the certificate in a bundle: PEM readers skip text
// outside BEGIN/END CERTIFICATE lines, and a new certificate (a fork, a
// restored snapshot: another sandbox, another CA) replaces the old one.
const (
	trustBegin = "# BEGIN lizard egress CA: this sandbox's network policy injects secrets into its HTTPS requests\n"
	trustEnd   = "# END lizard egress CA\n"
)

// trustBundles are the bundles found in the root filesystem: the
// system's, then certifi's.
func trustBundles() []string {
	out := []string{"/etc/ssl/certs/ca-certificates.crt"}
	for _, g := range []string{
		"/opt/lizard/venv/lib/python3*/site-packages/certifi/cacert.pem",
		"/opt/lizard/venv/lib/python3*/site-packages/pip/_vendor/certifi/cacert.pem",
		"/usr/lib/python3/dist-packages/certifi/cacert.pem",
		"/usr/local/lib/python3*/*-packages/certifi/cacert.pem",
	} {
		m, _ := filepath.Glob(g)
		out = append(out, m...)
	}
	return out
}

// trust answers POST /trust (api.TrustRequest): install this sandbox's
// egress CA, or remove it when the request names none.
func (a *Agent) trust(w http.ResponseWriter, r *http.Request) {
	var req api.TrustRequest
	if !a.decode(w, r, &req, false) {
		return
	}
	block := ""
	if req.CertPEM != "" {
		p, rest := pem.Decode([]byte(req.CertPEM))
		if p == nil || p.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) > 0 {
			writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, "certPem: want one PEM CERTIFICATE")
			return
		}
		c, err := x509.ParseCertificate(p.Bytes)
		if err != nil || !c.IsCA {
			writeError(w, http.StatusBadRequest, api.CodeInvalidArgument, "certPem: not a CA certificate")
			return
		}
		block = trustBegin + string(pem.EncodeToMemory(p)) + trustEnd
	}
	for _, b := range trustBundles() {
		if err := replaceTrust(b, block); err != nil {
			writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	var err error
	if block == "" {
		os.Remove(egressCAFile)
		_, err = a.renewEnv(ctx, nil, []string{"NODE_EXTRA_CA_CERTS"}, false)
	} else {
		if err = writeFileAtomic(egressCAFile, []byte(block), 0o644); err == nil {
			_, err = a.renewEnv(ctx, map[string]string{"NODE_EXTRA_CA_CERTS": egressCAFile}, nil, false)
		}
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
		return
	}
	a.log.Info("egress CA", "installed", block != "")
	w.WriteHeader(http.StatusNoContent)
}

// replaceTrust replaces the marked block in bundle path with block ("":
// none). A missing bundle is left missing.
func replaceTrust(path, block string) error {
	old, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	out := old
	if i := bytes.Index(old, []byte(trustBegin)); i >= 0 {
		end := len(old)
		if j := bytes.Index(old[i:], []byte(trustEnd)); j >= 0 {
			end = i + j + len(trustEnd)
		}
		out = append(append([]byte{}, old[:i]...), old[end:]...)
	}
	if block != "" {
		if len(out) > 0 && out[len(out)-1] != '\n' {
			out = append(out, '\n')
		}
		out = append(out, block...)
	}
	if bytes.Equal(out, old) {
		return nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, out, fi.Mode().Perm())
}

// writeFileAtomic replaces path with data: a reader sees the old bundle
// or the new, never half of one.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".lizard-trust-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
