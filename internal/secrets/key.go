package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/store"
)

// KeyFile is the key `lizard serve` makes in its data directory when the
// operator gives none.
const KeyFile = "secrets.key"

// KeyEnv holds a key (its text, as in a key file) for servers given none
// by flag.
const KeyEnv = "LIZARD_SECRETS_KEY"

// Key is the operator's key: 32 bytes for AES-256-GCM. Its text form is
// the base64 of the bytes (44 characters), one line.
type Key struct {
	aead cipher.AEAD
	id   string
	raw  []byte // for Derive
}

// ParseKey reads a key's text form.
func ParseKey(text string) (*Key, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(text))
	if err != nil || len(b) != 32 {
		return nil, errors.New("a secrets key is 32 random bytes in base64 (44 characters), such as `head -c 32 /dev/urandom | base64`")
	}
	block, err := aes.NewCipher(b)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	// The ID tells keys apart (a value sealed with another key is named
	// so, not reported as corrupt) and says nothing of the key.
	sum := sha256.Sum256(append([]byte("lizard secrets key id\x00"), b...))
	return &Key{aead: aead, id: hex.EncodeToString(sum[:8]), raw: b}, nil
}

// ID names the key without revealing it.
func (k *Key) ID() string { return k.id }

// Derive returns 32 bytes for purpose derived from the key (HKDF-SHA256):
// another use of the operator's key (the image store's, docs/storage.md)
// gets a key of its own, so that every process that has this one has
// that one too, and neither use's output tells anything of the other's.
func (k *Key) Derive(purpose string) []byte {
	b, err := hkdf.Key(sha256.New, k.raw, nil, "lizard "+purpose, 32)
	if err != nil {
		panic(err) // only for a length SHA-256 cannot give
	}
	return b
}

// LoadKey reads the key file at path.
func LoadKey(path string) (*Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the secrets key: %w", err)
	}
	k, err := ParseKey(string(b))
	if err != nil {
		return nil, fmt.Errorf("the secrets key %s: %w", path, err)
	}
	return k, nil
}

// LoadOrCreateKey reads the key file at path, making it (0600, a new
// random key) if there is none.
func LoadOrCreateKey(path string) (*Key, error) {
	k, err := LoadKey(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return k, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, err
	}
	text := base64.StdEncoding.EncodeToString(raw) + "\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("making the secrets key: %w", err)
	}
	// O_EXCL: two servers starting on one data directory make one key.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return LoadKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("making the secrets key: %w", err)
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		os.Remove(path)
		return nil, fmt.Errorf("making the secrets key: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return nil, fmt.Errorf("making the secrets key: %w", err)
	}
	return ParseKey(text)
}

// seal encrypts plain: the nonce, then the ciphertext and its tag.
func (k *Key) seal(plain, ad []byte) ([]byte, error) {
	nonce := make([]byte, k.aead.NonceSize(), k.aead.NonceSize()+len(plain)+k.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return k.aead.Seal(nonce, nonce, plain, ad), nil
}

// open decrypts and authenticates sec's sealed value. The errors say
// which key is wanted and never carry any of the value.
func (k *Key) open(sec store.Secret, ad []byte) ([]byte, error) {
	if sec.KeyID != k.id {
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable,
			Msg: fmt.Sprintf("secret %s was sealed with the secrets key %s, and this server holds key %s: give it the key the secret was set with, or set the secret again", sec.Name, sec.KeyID, k.id)}
	}
	n := k.aead.NonceSize()
	if len(sec.Sealed) < n+k.aead.Overhead() {
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("secret %s is damaged in the store: set it again", sec.Name)}
	}
	plain, err := k.aead.Open(nil, sec.Sealed[:n], sec.Sealed[n:], ad)
	if err != nil {
		return nil, &errdefs.Error{Kind: errdefs.ErrUnavailable, Msg: fmt.Sprintf("secret %s does not open with the secrets key %s (damaged, or moved from another row): set it again", sec.Name, k.id)}
	}
	return plain, nil
}
