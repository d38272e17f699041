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

// SandboxKeyIDs returns the IDs of the API keys tied to sandbox id (its
// lizardToken's), revoked or not, oldest first.
func (s *Store) SandboxKeyIDs(ctx context.Context, id string) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT id FROM api_keys WHERE sandbox_id = ? ORDER BY created_at, id`, id)
	if err != nil {
		return nil, fmt.Errorf("listing keys of sandbox %s: %w", id, err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, fmt.Errorf("listing keys of sandbox %s: %w", id, err)
		}
		ids = append(ids, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing keys of sandbox %s: %w", id, err)
	}
	return ids, nil
}
