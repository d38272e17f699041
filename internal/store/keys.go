package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Project owns sandboxes and API keys.
type Project struct {
	ID        string
	CreatedAt time.Time
}

// CreateProject adds a project; ErrConflict if one with that ID exists.
func (s *Store) CreateProject(ctx context.Context, id string, now time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO projects (id, created_at) VALUES (?, ?)`, id, toMillis(now))
	if isUniqueViolation(err) {
		return fmt.Errorf("creating project %q: %w", id, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("creating project %q: %w", id, err)
	}
	return nil
}

// GetProject returns the project with that ID or ErrNotFound.
func (s *Store) GetProject(ctx context.Context, id string) (Project, error) {
	var p Project
	var created int64
	err := s.db.QueryRowContext(ctx, `SELECT id, created_at FROM projects WHERE id = ?`, id).Scan(&p.ID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Project{}, fmt.Errorf("getting project %q: %w", id, ErrNotFound)
	}
	if err != nil {
		return Project{}, fmt.Errorf("getting project %q: %w", id, err)
	}
	p.CreatedAt = fromMillis(created)
	return p, nil
}

// CountProjects returns how many user projects there are (the server's
// own is not counted).
func (s *Store) CountProjects(ctx context.Context) (int, error) {
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT COUNT(*) FROM projects WHERE id != ?`, InternalProject).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting projects: %w", err)
	}
	return n, nil
}

// APIKey is a stored API key: its public ID and the SHA-256 of its secret,
// never the secret itself.
type APIKey struct {
	ID        string
	ProjectID string
	Hash      []byte
	CreatedAt time.Time
	RevokedAt *time.Time
	// SandboxID is set on keys minted for one sandbox (lizardToken); they
	// are revoked when that sandbox ends.
	SandboxID string
	// ExpiresAt, when set, is when the key stops working even unrevoked.
	ExpiresAt *time.Time
}

// Live reports whether k is good at now: neither revoked nor expired.
func (k APIKey) Live(now time.Time) bool {
	return k.RevokedAt == nil && (k.ExpiresAt == nil || now.Before(*k.ExpiresAt))
}

// CreateAPIKey stores k. ErrNotFound if its project (or sandbox) does not
// exist, ErrConflict if a key with that ID exists.
func (s *Store) CreateAPIKey(ctx context.Context, k APIKey) error {
	var sandboxID sql.NullString
	if k.SandboxID != "" {
		sandboxID = sql.NullString{String: k.SandboxID, Valid: true}
	}
	_, err := s.db.ExecContext(ctx,
		`INSERT INTO api_keys (id, project_id, hash, created_at, revoked_at, sandbox_id, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		k.ID, k.ProjectID, k.Hash, toMillis(k.CreatedAt), nullMillis(k.RevokedAt), sandboxID, nullMillis(k.ExpiresAt))
	switch {
	case isUniqueViolation(err):
		return fmt.Errorf("creating API key %s: %w", k.ID, ErrConflict)
	case isConstraint(err):
		// A foreign key: the project or sandbox is missing.
		return fmt.Errorf("creating API key for project %q: %w", k.ProjectID, ErrNotFound)
	case err != nil:
		return fmt.Errorf("creating API key %s: %w", k.ID, err)
	}
	return nil
}

// GetAPIKey returns the key with that ID (revoked or not) or ErrNotFound.
func (s *Store) GetAPIKey(ctx context.Context, id string) (APIKey, error) {
	var k APIKey
	var created int64
	var revoked, expires sql.NullInt64
	var sandboxID sql.NullString
	err := s.db.QueryRowContext(ctx,
		`SELECT id, project_id, hash, created_at, revoked_at, sandbox_id, expires_at FROM api_keys WHERE id = ?`, id).
		Scan(&k.ID, &k.ProjectID, &k.Hash, &created, &revoked, &sandboxID, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return APIKey{}, fmt.Errorf("getting API key %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return APIKey{}, fmt.Errorf("getting API key %s: %w", id, err)
	}
	k.CreatedAt = fromMillis(created)
	k.RevokedAt = timePtr(revoked)
	k.ExpiresAt = timePtr(expires)
	k.SandboxID = sandboxID.String
	return k, nil
}

// RevokeAPIKey revokes the key with that ID; revoking a revoked key keeps
// its first revocation time.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, now time.Time) error {
	res, err := s.db.ExecContext(ctx,
		`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, toMillis(now), id)
	if err != nil {
		return fmt.Errorf("revoking API key %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("revoking API key %s: %w", id, ErrNotFound)
	}
	return nil
}
