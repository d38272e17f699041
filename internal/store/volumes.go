package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Volumes are the projects' persistent volumes. Scoped like the Store
// that handed them out: on a node's handle (OnNode), List and
// PromisedDisk see that node's alone.
type Volumes struct{ s *Store }

// Volumes are the volumes in s's database.
func (s *Store) Volumes() Volumes { return Volumes{s} }

// Volume is a project's named persistent volume.
type Volume struct {
	ID        string
	ProjectID string
	Name      string
	SizeBytes int64
	CreatedAt time.Time
	// Node is the cluster node whose disk holds it ("": `lizard serve`).
	Node string
}

// VolumeMount is a volume as a sandbox mounts it, recorded in its Shape.
type VolumeMount struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	Path string `json:"path"`
}

const volumeColumns = `id, project_id, name, size_bytes, created_at, node`

func scanVolume(r scanner) (Volume, error) {
	var v Volume
	var created int64
	if err := r.Scan(&v.ID, &v.ProjectID, &v.Name, &v.SizeBytes, &created, &v.Node); err != nil {
		return v, err
	}
	v.CreatedAt = fromMillis(created)
	return v, nil
}

// Create records v; ErrConflict if its project has a volume of that
// name.
func (vs Volumes) Create(ctx context.Context, v Volume) error {
	_, err := vs.s.db.ExecContext(ctx, `INSERT INTO volumes (`+volumeColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
		v.ID, v.ProjectID, v.Name, v.SizeBytes, toMillis(v.CreatedAt), v.Node)
	if isUniqueViolation(err) {
		return fmt.Errorf("creating volume %s: %w", v.Name, ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("creating volume %s: %w", v.Name, err)
	}
	return nil
}

// Get returns projectID's volume called name.
func (vs Volumes) Get(ctx context.Context, projectID, name string) (Volume, error) {
	v, err := scanVolume(vs.s.db.QueryRowContext(ctx, `SELECT `+volumeColumns+` FROM volumes WHERE project_id = ? AND name = ?`, projectID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return v, fmt.Errorf("getting volume %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return v, fmt.Errorf("getting volume %s: %w", name, err)
	}
	return v, nil
}

// List returns projectID's volumes by name, or every project's
// with projectID "". On a handle scoped to a node (OnNode), only the
// volumes on that node's disk.
func (vs Volumes) List(ctx context.Context, projectID string) ([]Volume, error) {
	q, args := `SELECT `+volumeColumns+` FROM volumes WHERE 1 = 1`, []any{}
	if projectID != "" {
		q, args = q+` AND project_id = ?`, append(args, projectID)
	}
	if vs.s.scoped {
		q, args = q+` AND node = ?`, append(args, vs.s.node)
	}
	rows, err := vs.s.db.QueryContext(ctx, q+` ORDER BY project_id, name`, args...)
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

// Nodes returns the node of each of the volumes ids that exist.
func (vs Volumes) Nodes(ctx context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	rows, err := vs.s.db.QueryContext(ctx, `SELECT id, node FROM volumes WHERE id IN (`+placeholders(len(ids))+`)`, args...)
	if err != nil {
		return nil, fmt.Errorf("finding the nodes of volumes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, node string
		if err := rows.Scan(&id, &node); err != nil {
			return nil, fmt.Errorf("finding the nodes of volumes: %w", err)
		}
		out[id] = node
	}
	return out, rows.Err()
}

// SetNode records that volume id lives on node.
func (vs Volumes) SetNode(ctx context.Context, id, node string) error {
	if _, err := vs.s.db.ExecContext(ctx, `UPDATE volumes SET node = ? WHERE id = ?`, node, id); err != nil {
		return fmt.Errorf("recording the node of volume %s: %w", id, err)
	}
	return nil
}

// Delete removes volume id's record.
func (vs Volumes) Delete(ctx context.Context, id string) error {
	if _, err := vs.s.db.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id); err != nil {
		return fmt.Errorf("deleting volume %s: %w", id, err)
	}
	return nil
}

// Promised is the disk a project is promised, each part of which its code
// may write in full: its live sandboxes' disk limits and its volumes.
type Promised struct {
	Sandboxes    int
	SandboxBytes int64
	Volumes      int
	VolumeBytes  int64
}

// Total is every byte promised.
func (p Promised) Total() int64 { return p.SandboxBytes + p.VolumeBytes }

// PromisedDisk is what projectID is promised (on a handle scoped to a
// node, on that node alone); def is the disk of sandboxes recorded
// without a shape (the server's default).
func (vs Volumes) PromisedDisk(ctx context.Context, projectID string, def int64) (Promised, error) {
	var p Promised
	live, err := vs.s.ListSandboxes(ctx, Filter{ProjectID: projectID, LiveOnly: true})
	if err != nil {
		return p, fmt.Errorf("counting the disk of project %s: %w", projectID, err)
	}
	for _, sb := range live {
		p.Sandboxes++
		if sb.Shape.Recorded {
			p.SandboxBytes += sb.Shape.DiskBytes
		} else {
			p.SandboxBytes += def
		}
	}
	vols, err := vs.List(ctx, projectID)
	if err != nil {
		return p, fmt.Errorf("counting the disk of project %s: %w", projectID, err)
	}
	for _, v := range vols {
		p.Volumes++
		p.VolumeBytes += v.SizeBytes
	}
	return p, nil
}
