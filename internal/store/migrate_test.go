package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestMigrateFromEveryEarlierSchema makes a database at each earlier
// schema version (migrations[:v]), puts a row in every table it has —
// every column set, values that satisfy the foreign keys (every text is
// the same "{}", every integer 1) — and opens it with this Lizard: every
// migration since v applies over the data, and every table that is still
// there has as many rows as before.
// An upgrade starts from a database in use, not an empty one (issue 38).
func TestMigrateFromEveryEarlierSchema(t *testing.T) {
	ctx := context.Background()
	forEachStore(t, func(t *testing.T, be backend) {
		for v := 1; v < len(migrations); v++ {
			t.Run(fmt.Sprintf("from%d", v), func(t *testing.T) {
				u := be.newURL(t)
				old := openRaw(t, be, u)
				if err := old.migrateTo(ctx, v); err != nil {
					t.Fatalf("making schema %d: %v", v, err)
				}
				filled := fill(t, old)
				before := map[string]int{}
				for _, table := range filled {
					before[table] = count(t, old, table)
				}
				old.Close()
				s := openURL(t, u)
				if got, err := s.Version(ctx); err != nil || got != len(migrations) {
					t.Fatalf("schema after opening = %d, %v; want %d", got, err, len(migrations))
				}
				now := tables(t, s)
				for _, table := range filled {
					if !now[table] {
						continue // dropped by a later migration
					}
					if n := count(t, s, table); n != before[table] {
						t.Errorf("table %s after migrating from schema %d: %d rows, want the %d it had", table, v, n, before[table])
					}
				}
				if s.Dialect() == "sqlite" {
					var ok string
					if err := s.db.QueryRowContext(ctx, `PRAGMA integrity_check`).Scan(&ok); err != nil || ok != "ok" {
						t.Errorf("integrity_check after migrating from schema %d: %q, %v", v, ok, err)
					}
				}
			})
		}
	})
}

func count(t *testing.T, s *Store, table string) int {
	t.Helper()
	var n int
	if err := s.db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM "`+table+`"`).Scan(&n); err != nil {
		t.Fatalf("counting %s: %v", table, err)
	}
	return n
}

// openRaw opens u's empty database without migrating it.
func openRaw(t *testing.T, be backend, u string) *Store {
	t.Helper()
	var s *Store
	var err error
	if be.name == "sqlite" {
		s, err = openSQLite(u)
	} else {
		s, _, err = connectPostgres(u)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// tables are the store's tables (but schema_version).
func tables(t *testing.T, s *Store) map[string]bool {
	t.Helper()
	q := `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`
	if s.Dialect() == "postgres" {
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`
	}
	rows, err := s.db.QueryContext(context.Background(), q)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			t.Fatal(err)
		}
		if name != "schema_version" {
			out[name] = true
		}
	}
	return out
}

// columns are table's columns with a value of their type for each.
func columns(t *testing.T, s *Store, table string) (names []string, values []any) {
	t.Helper()
	q := `SELECT name, type FROM pragma_table_info(?)`
	if s.Dialect() == "postgres" {
		q = `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ?`
	}
	rows, err := s.db.QueryContext(context.Background(), q, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		typ = strings.ToUpper(typ)
		var v any = "{}"
		switch {
		case strings.Contains(typ, "INT"):
			v = int64(1)
		case strings.Contains(typ, "BLOB"), strings.Contains(typ, "BYTEA"):
			v = []byte{0}
		case strings.Contains(typ, "BOOL"):
			v = true
		}
		names = append(names, `"`+name+`"`)
		values = append(values, v)
	}
	return names, values
}

// fill puts one row in every table of s, parents before the rows whose
// foreign keys name them (passes until none is left), and returns the
// tables it filled.
func fill(t *testing.T, s *Store) []string {
	t.Helper()
	left := tables(t, s)
	var filled []string
	for len(left) > 0 {
		var lastErr error
		progress := false
		for table := range left {
			names, values := columns(t, s, table)
			_, err := s.db.ExecContext(context.Background(), `INSERT INTO "`+table+`" (`+strings.Join(names, ", ")+`) VALUES (`+placeholders(len(names))+`)`, values...)
			if err != nil {
				lastErr = fmt.Errorf("%s: %w", table, err)
				continue
			}
			delete(left, table)
			filled = append(filled, table)
			progress = true
		}
		if !progress {
			t.Fatalf("filling the tables left %v: %v", left, lastErr)
		}
	}
	return filled
}
