package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestDiskFullMarked: a SQLite database that cannot grow (max_page_count
// stands in for a full disk, with the real SQLITE_FULL) fails writes with
// ErrDiskFull, which the API answers with 507, not a 500.
func TestDiskFullMarked(t *testing.T) {
	ctx := context.Background()
	s := openURL(t, filepath.Join(t.TempDir(), FileName))
	s.db.SetMaxOpenConns(1) // the pragma is the connection's
	var pages int
	if err := s.db.QueryRowContext(ctx, `PRAGMA page_count`).Scan(&pages); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.ExecContext(ctx, fmt.Sprintf(`PRAGMA max_page_count = %d`, pages+2)); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		err := s.CreateProject(ctx, fmt.Sprintf("%s%d", strings.Repeat("p", 2000), i), time.Now())
		if err == nil {
			if i > 1000 {
				t.Fatal("1000 projects fit in a database that may not grow")
			}
			continue
		}
		if !errors.Is(err, ErrDiskFull) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("a write to a full database = %v; want ErrDiskFull", err)
		}
		break
	}
}

func TestDiskFullWrap(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want error // nil: neither mark
	}{
		{"postgres disk_full", &pgconn.PgError{Code: "53100"}, ErrDiskFull},
		{"ENOSPC", &fs.PathError{Op: "write", Path: "lizard.db-wal", Err: syscall.ENOSPC}, ErrDiskFull},
		{"EDQUOT", fmt.Errorf("writing: %w", syscall.EDQUOT), ErrDiskFull},
		{"postgres down", &pgconn.PgError{Code: "57P01"}, ErrUnavailable},
		{"postgres unique violation", &pgconn.PgError{Code: "23505"}, nil},
	}
	for _, d := range []dialect{sqliteDialect, postgresDialect} {
		for _, tt := range tests {
			got := d.wrap(tt.err)
			for _, mark := range []error{ErrDiskFull, ErrUnavailable} {
				if errors.Is(got, mark) != (mark == tt.want) {
					t.Errorf("%s: %s wrapped = %v; errors.Is %v = %v, want %v", d, tt.name, got, mark, errors.Is(got, mark), mark == tt.want)
				}
			}
		}
	}
}
