package main

import (
	"bytes"
	"log/slog"
	"slices"
	"testing"
	"time"
)

// TestMoveParts: the parts of a move are read from lines as the nodes'
// slog text handler writes them, only for the sandboxes asked about.
func TestMoveParts(t *testing.T) {
	var a, b bytes.Buffer
	la, lb := slog.New(slog.NewTextHandler(&a, nil)), slog.New(slog.NewTextHandler(&b, nil))
	la.Info("sandbox paused", "sandbox_id", "sb1", "project_id", "p", "kept", "checkpoint", "image", "/d/paused/sb1", "size_bytes", 77, "took", 900*time.Millisecond)
	la.Info("sandbox paused", "sandbox_id", "other", "took", time.Second)
	la.Info("image uploaded to the image store", "image", "paused/sb1", "size_bytes", 81234567, "took", 455*time.Millisecond)
	la.Info("image uploaded to the image store", "image", "snapshots/sn1", "size_bytes", 5, "took", time.Second)
	lb.Info("image fetched from the image store", "image", "paused/sb1", "size_bytes", 81234567, "took", 120*time.Millisecond)
	lb.Info("sandbox resumed", "sandbox_id", "sb1", "project_id", "p", "source", "resume", "took", 1200*time.Millisecond)
	got := moveParts(a.String(), b.String(), map[string]string{"sb1": "(1, 'DataFrame', 0)"})
	for k, want := range map[string][]float64{"pause_ms": {900}, "upload_ms": {455}, "image_bytes": {81234567}, "fetch_ms": {120}, "resume_ms": {1200}} {
		if !slices.Equal(got[k], want) {
			t.Errorf("%s = %v; want %v", k, got[k], want)
		}
	}
}

// TestTakePoolFromEnv: with LIZARD_TEST_ADDRESS_POOL the nodes take its
// /24s in turn, and no more than it has.
func TestTakePoolFromEnv(t *testing.T) {
	t.Setenv("LIZARD_TEST_ADDRESS_POOL", "169.254.204.0/23")
	poolsTaken = 0
	defer func() { poolsTaken = 0 }()
	var got []string
	for range 2 {
		p, err := takePool()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if want := []string{"169.254.204.0/24", "169.254.205.0/24"}; !slices.Equal(got, want) {
		t.Errorf("pools = %v; want %v", got, want)
	}
	if p, err := takePool(); err == nil {
		t.Errorf("a third /24 of a /23: %s; want an error", p)
	}
}
