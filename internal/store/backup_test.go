package store

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

// TestBackupTo copies a SQLite store while another handle holds it open
// and has written to it since its last checkpoint (the rows are in the
// WAL); the copy opens on its own with those rows. PostgreSQL answers
// ErrNotSQLite.
func TestBackupTo(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		newSandbox(t, s, "a", "p", 2)
		to := filepath.Join(t.TempDir(), "copy.db")
		err := s.BackupTo(ctx, to)
		if s.Dialect() == "postgres" {
			if !errors.Is(err, ErrNotSQLite) {
				t.Fatalf("BackupTo on PostgreSQL = %v, want ErrNotSQLite", err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := s.BackupTo(ctx, to); err == nil {
			t.Fatal("BackupTo over an existing file succeeded, want an error")
		}
		c, err := OpenFile(ctx, to)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.GetProject(ctx, "p"); err != nil {
			t.Errorf("the copy's project p: %v", err)
		}
		if sb, err := c.GetSandbox(ctx, "a"); err != nil || sb.ProjectID != "p" {
			t.Errorf("the copy's sandbox a = %+v, %v", sb, err)
		}
	})
}

// TestMoveImages rewrites the image paths under one directory, and only
// those: a path that merely starts with the same letters stays.
func TestMoveImages(t *testing.T) {
	forEachStore(t, func(t *testing.T, be backend) {
		s := be.open(t)
		ctx := context.Background()
		if err := s.CreateProject(ctx, "p", time.Now()); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"a", "b"} {
			newSandbox(t, s, id, "p", 4)
			if err := s.MarkRunning(ctx, id, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.PauseSandbox(ctx, "a", "/old/data/images/a", nil, time.Now(), true); err != nil {
			t.Fatal(err)
		}
		if err := s.PauseSandbox(ctx, "b", "/old/data2/images/b", nil, time.Now(), true); err != nil {
			t.Fatal(err)
		}
		if err := s.CreateSnapshot(ctx, Snapshot{ID: "s1", ProjectID: "p", SandboxID: "a", Template: "t", CreatedAt: time.Now(), ImageDir: "/old/data/snapshots/s1"}); err != nil {
			t.Fatal(err)
		}
		n, err := s.MoveImages(ctx, "/old/data/", "/new/place")
		if err != nil || n != 2 {
			t.Fatalf("MoveImages = %d, %v; want 2 rows", n, err)
		}
		for id, want := range map[string]string{"a": "/new/place/images/a", "b": "/old/data2/images/b"} {
			if p, err := s.GetPause(ctx, id); err != nil || p.ImageDir != want {
				t.Errorf("pause of %s = %q, %v; want %q", id, p.ImageDir, err, want)
			}
		}
		if sn, err := s.GetSnapshot(ctx, "s1"); err != nil || sn.ImageDir != "/new/place/snapshots/s1" {
			t.Errorf("snapshot s1 = %q, %v; want /new/place/snapshots/s1", sn.ImageDir, err)
		}
	})
}
