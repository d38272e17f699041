package store

import (
	"context"
	"fmt"
)

// SandboxHasLiveKey reports whether an unrevoked API key is tied to sandbox
// id (a lizardToken).
func (s *Store) SandboxHasLiveKey(ctx context.Context, id string) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM api_keys WHERE sandbox_id = ? AND revoked_at IS NULL`, id).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("looking up keys of sandbox %s: %w", id, err)
	}
	return n > 0, nil
}
