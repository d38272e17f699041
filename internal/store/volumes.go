package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Volume is a project's named persistent volume.
type Volume struct {
	ID        string
	ProjectID string
	Name      string
	SizeBytes int64
	CreatedAt time.Time
}

// VolumeMount is a volume as a sandbox mounts it, recorded in its Shape.
type VolumeMount struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Path string `json:"path"`
}

const volumeColumns = `id, project_id, name, size_bytes, created_at`

func scanVolume(r scanner) (Volume, error) {
	var v Volume
	var created int64
	if err := r.Scan(&v.ID, &v.ProjectID, &v.Name, &v.SizeBytes, &created); err != nil {
		return v, err
	}
	v.CreatedAt = fromMillis(created)
	return v, nil
}

// CreateVolume records v; ErrConflict if its project has a volume of that
// name.
func (s *Store) CreateVolume(ctx context.Context, v Volume) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?, ?)`,
		v.ID, v.ProjectID, v.Name, v.SizeBytes, toMillis(v.CreatedAt))
	if isUniqueViolation(err) {
		return fmt.Errorf("creating volume %s: %w", v.Name, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	return nil
}

// GetVolume returns projectID's volume called name.
func (s *Store) GetVolume(ctx context.Context, projectID, name string) (Volume, error) {
	v, err := scanVolume(s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE project_id = ? AND name = ?`, projectID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("getting volume %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("getting volume %s: %w", name, err)
	}
	return v, nil
}

// ListVolumes returns projectID's volumes by name, or every project's
// with projectID "".
func (s *Store) ListVolumes(ctx context.Context, projectID string) ([]Volume, error) {
	q, args := `SELECT `+volumeColumns+` FROM volumes`, []any{}
	if projectID != "" {
		q, args = q+` WHERE project_id = ?`, append(args, projectID)
	}
	rows, err := s.db.QueryContext(ctx, q+` ORDER BY project_id, name`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	defer rows.Close()
	var out []Volume
	for rows.Next() {
		v, err := scanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("listing volumes: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	return out, nil
}

// DeleteVolume removes volume id's record.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	return nil
}
