package store

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOpenURLForms(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	for _, tc := range []struct {
		name, url, dialect string
	}{
		{"plain path", filepath.Join(dir, "a.db"), "sqlite"},
		{"sqlite:PATH", "sqlite:" + filepath.Join(dir, "b.db"), "sqlite"},
		{"sqlite:///abs", "sqlite://" + filepath.Join(dir, "c.db"), "sqlite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openURL(t, tc.url)
			if s.Dialect() != tc.dialect {
				t.Fatalf("Dialect = %s; want %s", s.Dialect(), tc.dialect)
			}
			if v, err := s.Version(ctx); err != nil || v != SchemaVersion {
				t.Fatalf("Version = %d, %v; want %d", v, err, SchemaVersion)
			}
		})
	}
	for _, bad := range []string{"", "mysql://u:hunter2@h/db"} {
		_, err := OpenURL(ctx, bad)
		if err == nil {
			t.Errorf("OpenURL(%q) succeeded; want an error", bad)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("OpenURL(%q) error shows the password: %v", bad, err)
		}
	}
}

// A PostgreSQL that is not there: OpenURL fails with ErrUnavailable, and
// its message does not show the password.
func TestOpenURLUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = OpenURL(ctx, "postgres://lizard:hunter2@"+addr+"/lizard?sslmode=disable&connect_timeout=5")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("OpenURL of a closed port = %v; want ErrUnavailable", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error shows the password: %v", err)
	}
}
