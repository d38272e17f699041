package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Secrets are the projects' sealed secrets.
type Secrets struct{ s *Store }

// Secrets are the secrets in s's database.
func (s *Store) Secrets() Secrets { return Secrets{s} }

// Secret is a project's named secret as stored: its value sealed (package
// secrets encrypts and authenticates it) under the key KeyID names.
type Secret struct {
	ProjectID string
	Name      string
	KeyID     string
	Sealed    []byte
	// Hosts are the names and wildcards it may be sent to (none for a
	// secret set before they were recorded: it goes nowhere), AllowHTTP
	// whether over plain HTTP too.
	Hosts     []string
	AllowHTTP bool
	CreatedAt time.Time
	UpdatedAt time.Time
}

const secretColumns = `project_id, name, key_id, sealed, hosts, allow_http, created_at, updated_at`

func scanSecret(r scanner) (Secret, error) {
	var s Secret
	var hosts string
	var allowHTTP, created, updated int64
	if err := r.Scan(&s.ProjectID, &s.Name, &s.KeyID, &s.Sealed, &hosts, &allowHTTP, &created, &updated); err != nil {
		return s, err
	}
	return s, s.fill(hosts, allowHTTP, created, updated)
}

func (s *Secret) fill(hosts string, allowHTTP, created, updated int64) error {
	if hosts != "" {
		if err := json.Unmarshal([]byte(hosts), &s.Hosts); err != nil {
			return fmt.Errorf("decoding the hosts of secret %s: %w", s.Name, err)
		}
	}
	s.AllowHTTP = allowHTTP != 0
	s.CreatedAt, s.UpdatedAt = fromMillis(created), fromMillis(updated)
	return nil
}

func encodeHosts(hosts []string) (string, error) {
	if len(hosts) == 0 {
		return "", nil
	}
	b, err := json.Marshal(hosts)
	return string(b), err
}

// Put records sec, replacing the sealed value of a secret of the
// same name (which keeps its CreatedAt). One upsert, so that two sets of
// one name at once leave one of the two values, never an error.
func (ss Secrets) Put(ctx context.Context, sec Secret) error {
	hosts, err := encodeHosts(sec.Hosts)
	if err != nil {
		return fmt.Errorf("setting secret %s: %w", sec.Name, err)
	}
	allowHTTP := 0
	if sec.AllowHTTP {
		allowHTTP = 1
	}
	_, err = ss.s.db.ExecContext(ctx, `INSERT INTO secrets (`+secretColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (project_id, name) DO UPDATE SET key_id = excluded.key_id, sealed = excluded.sealed,
			hosts = excluded.hosts, allow_http = excluded.allow_http, updated_at = excluded.updated_at`,
		sec.ProjectID, sec.Name, sec.KeyID, sec.Sealed, hosts, allowHTTP, toMillis(sec.CreatedAt), toMillis(sec.UpdatedAt))
	if err != nil {
		return fmt.Errorf("setting secret %s: %w", sec.Name, err)
	}
	return nil
}

// Get returns projectID's secret called name, or ErrNotFound.
func (ss Secrets) Get(ctx context.Context, projectID, name string) (Secret, error) {
	sec, err := scanSecret(ss.s.db.QueryRowContext(ctx, `SELECT `+secretColumns+` FROM secrets WHERE project_id = ? AND name = ?`, projectID, name))
	if errors.Is(err, sql.ErrNoRows) {
		return sec, fmt.Errorf("getting secret %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return sec, fmt.Errorf("getting secret %s: %w", name, err)
	}
	return sec, nil
}

// List returns projectID's secrets by name, without their sealed
// values: a list never needs them.
func (ss Secrets) List(ctx context.Context, projectID string) ([]Secret, error) {
	rows, err := ss.s.db.QueryContext(ctx, `SELECT project_id, name, key_id, hosts, allow_http, created_at, updated_at FROM secrets WHERE project_id = ? ORDER BY name`, projectID)
	if err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	defer rows.Close()
	var out []Secret
	for rows.Next() {
		var sec Secret
		var hosts string
		var allowHTTP, created, updated int64
		if err := rows.Scan(&sec.ProjectID, &sec.Name, &sec.KeyID, &hosts, &allowHTTP, &created, &updated); err != nil {
			return nil, fmt.Errorf("listing secrets: %w", err)
		}
		if err := sec.fill(hosts, allowHTTP, created, updated); err != nil {
			return nil, fmt.Errorf("listing secrets: %w", err)
		}
		out = append(out, sec)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing secrets: %w", err)
	}
	return out, nil
}

// Delete removes projectID's secret called name; ErrNotFound if it
// has none.
func (ss Secrets) Delete(ctx context.Context, projectID, name string) error {
	res, err := ss.s.db.ExecContext(ctx, `DELETE FROM secrets WHERE project_id = ? AND name = ?`, projectID, name)
	if err != nil {
		return fmt.Errorf("deleting secret %s: %w", name, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("deleting secret %s: %w", name, err)
	} else if n == 0 {
		return fmt.Errorf("deleting secret %s: %w", name, ErrNotFound)
	}
	return nil
}
