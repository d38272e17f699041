package imagestore

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
)

// PutTar stores tar stream data as image name, sealed with the store's
// key: what a holder of the key could write.
func (s *Store) PutTar(ctx context.Context, name string, data []byte) (Manifest, error) {
	return s.put(ctx, name, nil, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// PutManifest writes m as image name's manifest under a good MAC.
func (s *Store) PutManifest(ctx context.Context, name string, m Manifest) error {
	body, _ := json.Marshal(m)
	env, _ := json.Marshal(envelope{Format: format, KeyID: s.key.ID(), Manifest: body, MAC: hex.EncodeToString(s.key.manifestMAC(name, body))})
	return s.b.Put(ctx, manifestKey(name), bytes.NewReader(env))
}

// PutSharedFile stores file p as the shared object of content sum,
// sealed with the store's key, whatever p holds: what a holder of the key
// could write.
func (s *Store) PutSharedFile(ctx context.Context, sum, p string) error {
	_, err := s.putSharedObject(ctx, sharedKey(sum), p)
	return err
}
