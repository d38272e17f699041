package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNotSQLite is BackupTo's answer on PostgreSQL, whose own tools
// (pg_dump) back it up: docs/operations.md says what they cover.
var ErrNotSQLite = errors.New("the store is PostgreSQL: back it up with pg_dump (docs/operations.md)")

// BackupTo writes a consistent copy of the SQLite database to path, which
// must not exist, while other connections and processes keep reading and
// writing it: VACUUM INTO reads the database in one read transaction (a
// snapshot WAL mode keeps for it) and writes a compact copy with no WAL of
// its own.
func (s *Store) BackupTo(ctx context.Context, path string) error {
	if s.db.d != sqliteDialect {
		return ErrNotSQLite
	}
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("backing up the store to %s: it exists", path)
	}
	if _, err := s.db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		return fmt.Errorf("backing up the store to %s: %w", path, err)
	}
	return nil
}

// MoveImages rewrites the image paths of paused sandboxes and snapshots
// under the directory from to the same paths under to: a data directory
// restored elsewhere (docs/operations.md) keeps its images at new paths.
// It returns how many rows it changed.
func (s *Store) MoveImages(ctx context.Context, from, to string) (int64, error) {
	from, to = filepath.Clean(from), filepath.Clean(to)
	if from == to {
		return 0, nil
	}
	var n int64
	for _, table := range []string{"sandbox_pause", "snapshots"} {
		// substr is 1-based: the rest of the path, from its "/" on.
		res, err := s.db.ExecContext(ctx, `UPDATE `+table+` SET image_dir = CAST(? AS TEXT) || substr(image_dir, ?)
			WHERE substr(image_dir, 1, ?) = ?`, to, len(from)+1, len(from)+1, from+"/")
		if err != nil {
			return n, fmt.Errorf("moving the images of %s from %s to %s: %w", table, from, to, err)
		}
		c, _ := res.RowsAffected()
		n += c
	}
	return n, nil
}

// SetPauseImage records dir as paused sandbox id's image: a restore names
// the copy it made, or an image it left in the image store.
func (s *Store) SetPauseImage(ctx context.Context, id, dir string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE sandbox_pause SET image_dir = ? WHERE sandbox_id = ?`, dir, id)
	if err != nil {
		return fmt.Errorf("setting the image of sandbox %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("setting the image of sandbox %s: %w", id, ErrNotFound)
	}
	return nil
}

// SetSnapshotImage records dir as snapshot id's image.
func (s *Store) SetSnapshotImage(ctx context.Context, id, dir string) error {
	res, err := s.db.ExecContext(ctx, `UPDATE snapshots SET image_dir = ? WHERE id = ?`, dir, id)
	if err != nil {
		return fmt.Errorf("setting the image of snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("setting the image of snapshot %s: %w", id, ErrNotFound)
	}
	return nil
}
