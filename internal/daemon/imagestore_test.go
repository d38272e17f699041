package daemon

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/secrets"
)

// An image store is sealed with a key derived from the secrets key: a
// node given one and no key refuses to start, naming both ways to give
// it; two nodes with the same key read each other's images.
func TestImageStoreNeedsSecretsKey(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	f := imageStoreFlags{URL: "file://" + t.TempDir(), CacheMb: 64}
	if _, _, err := f.open(ctx, t.TempDir(), func(string) string { return "" }, nil, log); err == nil ||
		!strings.Contains(err.Error(), "--secrets-key-file") || !strings.Contains(err.Error(), secrets.KeyEnv) {
		t.Fatalf("open without a secrets key: %v; want a refusal naming --secrets-key-file and %s", err, secrets.KeyEnv)
	}
	raw := make([]byte, 32)
	rand.Read(raw)
	key, err := secrets.ParseKey(base64.StdEncoding.EncodeToString(raw))
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := f.open(ctx, t.TempDir(), func(string) string { return "" }, key, log)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := f.open(ctx, t.TempDir(), func(string) string { return "" }, key, log)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Put(ctx, "snapshots/s", t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "snapshots/s", filepath.Join(t.TempDir(), "got")); err != nil {
		t.Fatalf("another node with the same secrets key: %v", err)
	}
}
