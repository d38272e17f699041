package template

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

func TestBuildsRetryAfterFailure(t *testing.T) {
	var calls atomic.Int32
	ensure := func(ctx context.Context, cacheDir, name string, progress io.Writer) (string, error) {
		if calls.Add(1) == 1 {
			return "", errors.New("network down")
		}
		return "/cache/" + name + "-abc/rootfs", nil
	}
	b := NewBuilds(context.Background(), ensure, "/cache", nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	if _, err := b.Artifact(ctx, "interpreter"); err == nil {
		t.Fatal("first Artifact succeeded; want the build's error")
	}
	got, err := b.Artifact(ctx, "interpreter")
	if err != nil || got.RootFS != "/cache/interpreter-abc/rootfs" || got.Name != "interpreter" || got.Key != "interpreter-abc" {
		t.Fatalf("second Artifact = %+v, %v; want a fresh build keyed by its directory", got, err)
	}
	b.Artifact(ctx, "interpreter")
	if n := calls.Load(); n != 2 {
		t.Errorf("ensure called %d times; want 2 (a success is cached)", n)
	}
}

// TestBuildsWaiterGivesUp checks that a waiter whose ctx ends stops
// waiting while the build goes on.
func TestBuildsWaiterGivesUp(t *testing.T) {
	block := make(chan struct{})
	b := NewBuilds(context.Background(), func(context.Context, string, string, io.Writer) (string, error) {
		<-block
		return "/r", nil
	}, "", nil, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := b.Artifact(cctx, "interpreter"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Artifact with an expiring ctx = %v; want DeadlineExceeded", err)
	}
	close(block)
	if got, err := b.Artifact(ctx, "interpreter"); err != nil || got.RootFS != "/r" {
		t.Errorf("Artifact after the build = %+v, %v", got, err)
	}
}
