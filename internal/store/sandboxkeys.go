package store

import (
	"context"
	"fmt"
	"time"
)

// SandboxHasLiveKey reports whether an API key tied to sandbox id (a
// lizardToken) is good at now: unrevoked and unexpired.
func (s *Store) SandboxHasLiveKey(ctx context.Context, id string, now time.Time) (bool, error) {
	var n int
	err := s.db.QueryRowContext(ctx,
		`SELECT COUNT(*) FROM api_keys WHERE sandbox_id = ? AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?)`,
		id, toMillis(now)).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("looking up keys of sandbox %s: %w", id, err)
	}
	return n > 0, nil
}
