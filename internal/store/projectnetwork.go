package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/lizard-build/lizard/internal/netpolicy"
)

// SetProjectNetwork makes pol (nil: none) projectID's default network
// policy, that of its sandboxes whose create gives none; ErrNotFound if
// there is no such project.
func (s *Store) SetProjectNetwork(ctx context.Context, projectID string, pol *netpolicy.Policy) error {
	enc := ""
	if pol != nil {
		b, err := json.Marshal(pol)
		if err != nil {
			return fmt.Errorf("encoding project %q's network policy: %w", projectID, err)
		}
		enc = string(b)
	}
	res, err := s.db.ExecContext(ctx, `UPDATE projects SET network = ? WHERE id = ?`, enc, projectID)
	if err != nil {
		return fmt.Errorf("setting project %q's network policy: %w", projectID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("setting project %q's network policy: %w", projectID, err)
	} else if n == 0 {
		return fmt.Errorf("setting project %q's network policy: %w", projectID, ErrNotFound)
	}
	return nil
}

// ProjectNetwork returns projectID's default network policy, nil if it
// has none; ErrNotFound if there is no such project.
func (s *Store) ProjectNetwork(ctx context.Context, projectID string) (*netpolicy.Policy, error) {
	var enc string
	err := s.db.QueryRowContext(ctx, `SELECT network FROM projects WHERE id = ?`, projectID).Scan(&enc)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("getting project %q's network policy: %w", projectID, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("getting project %q's network policy: %w", projectID, err)
	}
	if enc == "" {
		return nil, nil
	}
	var pol netpolicy.Policy
	if err := json.Unmarshal([]byte(enc), &pol); err != nil {
		return nil, fmt.Errorf("decoding project %q's network policy: %w", projectID, err)
	}
	return &pol, nil
}
