package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// Templates are the projects' custom templates.
type Templates struct{ s *Store }

// Templates are the templates in s's database.
func (s *Store) Templates() Templates { return Templates{s} }

// Template is a project's custom template: its name, the key of its build
// in the template cache (the recipe's hash) and the recipe, as JSON.
type Template struct {
	ProjectID string
	Name      string
	Key       string
	Base      string
	Recipe    string
	CreatedAt time.Time
	BuildMs   int64
	SizeBytes int64
	// Digest is the image's, for a template built on one.
	Digest string
}

const templateColumns = `project_id, name, tkey, base, recipe, created_at, build_ms, size_bytes, digest`

func scanTemplate(row interface{ Scan(...any) error }) (Template, error) {
	var t Template
	var created int64
	err := row.Scan(&t.ProjectID, &t.Name, &t.Key, &t.Base, &t.Recipe, &created, &t.BuildMs, &t.SizeBytes, &t.Digest)
	t.CreatedAt = fromMillis(created)
	return t, err
}

// Put records t, replacing the project's template of that name.
func (ts Templates) Put(ctx context.Context, t Template) error {
	_, err := ts.s.db.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(project_id, name) DO UPDATE SET tkey = excluded.tkey, base = excluded.base, recipe = excluded.recipe,
		created_at = excluded.created_at, build_ms = excluded.build_ms, size_bytes = excluded.size_bytes, digest = excluded.digest`,
		t.ProjectID, t.Name, t.Key, t.Base, t.Recipe, toMillis(t.CreatedAt), t.BuildMs, t.SizeBytes, t.Digest)
	if err != nil {
		return fmt.Errorf("recording template %s: %w", t.Name, err)
	}
	return nil
}

// Get returns projectID's template name or ErrNotFound.
func (ts Templates) Get(ctx context.Context, projectID, name string) (Template, error) {
	t, err := scanTemplate(ts.s.db.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE project_id = ? AND name = ?`, projectID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return Template{}, fmt.Errorf("getting template %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return Template{}, fmt.Errorf("getting template %s: %w", name, err)
	}
	return t, nil
}

// List returns projectID's templates (every project's when
// projectID is ""), by name.
func (ts Templates) List(ctx context.Context, projectID string) ([]Template, error) {
	q := `SELECT ` + templateColumns + ` FROM templates`
	var args []any
	if projectID != "" {
		q += ` WHERE project_id = ?`
		args = append(args, projectID)
	}
	rows, err := ts.s.db.QueryContext(ctx, q+` ORDER BY name, project_id`, args...)
	if err != nil {
		return nil, fmt.Errorf("listing templates: %w", err)
	}
	defer rows.Close()
	var out []Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, fmt.Errorf("listing templates: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Delete removes projectID's template name; ErrNotFound if absent.
func (ts Templates) Delete(ctx context.Context, projectID, name string) error {
	res, err := ts.s.db.ExecContext(ctx, `DELETE FROM templates WHERE project_id = ? AND name = ?`, projectID, name)
	if err != nil {
		return fmt.Errorf("deleting template %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return fmt.Errorf("deleting template %s: %w", name, ErrNotFound)
	}
	return nil
}
