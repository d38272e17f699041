package gvisor

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestRestoreWithKeptBuild: an image made by another runsc build (a copy of
// runsc with bytes appended: another hash, the same code) is restored by
// that build's copy kept in the Runtime's directory — its original binary
// gone, as after an upgrade — and the sandbox stays that build's: its
// Sentry runs the kept copy, its next image names that build, and a
// Runtime started anew on the directory finds it so.
func TestRestoreWithKeptBuild(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	old := filepath.Join(t.TempDir(), "runsc")
	copyRunsc(t, testenv.Runsc(t), old, "another build")
	rOld, err := New(Config{Runsc: old, Dir: dir, Logger: log, SpareNetworks: -1})
	if err != nil {
		t.Fatal(err)
	}
	rootfs := sandboxtest.BuildRootFS(t)
	spec := sandboxtest.Spec(rootfs)
	t.Cleanup(func() { rOld.Kill(ctx, spec.ID) })
	if err := rOld.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := rOld.Checkpoint(ctx, spec.ID, image, false); err != nil {
		t.Fatal(err)
	}
	if got := imageBuild(t, image); got != rOld.ImageKey() {
		t.Fatalf("the image names build %q; want %q", got, rOld.ImageKey())
	}

	// The upgrade: the old binary replaced by another build.
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Runsc: testenv.Runsc(t), Dir: dir, Logger: log, SpareNetworks: -1})
	if err != nil {
		t.Fatal(err)
	}
	if r.ImageKey() == rOld.ImageKey() {
		t.Fatalf("both runsc binaries are build %s", r.ImageKey())
	}
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Restore(ctx, spec, image); err != nil {
		t.Fatalf("Restore of the other build's image: %v", err)
	}
	if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	pid, err := r.sentryPid(spec.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := KeptRunsc(dir, rOld.ImageKey())
	if exe, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "exe")); exe != want {
		t.Errorf("the restored Sentry runs %s; want the kept build %s", exe, want)
	}
	again := filepath.Join(t.TempDir(), "image")
	if err := r.Checkpoint(ctx, spec.ID, again, true); err != nil {
		t.Fatal(err)
	}
	if got := imageBuild(t, again); got != rOld.ImageKey() {
		t.Errorf("the restored sandbox's next image names build %q; want its own, %q", got, rOld.ImageKey())
	}
	restarted, err := New(Config{Runsc: testenv.Runsc(t), Dir: dir, Logger: log, SpareNetworks: -1})
	if err != nil {
		t.Fatal(err)
	}
	if got := restarted.runscOf(spec.ID); got != want {
		t.Errorf("a Runtime started anew runs %s for the sandbox; want %s", got, want)
	}
	if st, err := restarted.State(ctx, spec.ID); err != nil || st != sandbox.Running {
		t.Errorf("State through a Runtime started anew = %v, %v; want running", st, err)
	}
	if err := restarted.Kill(ctx, spec.ID); err != nil {
		t.Fatal(err)
	}
}

// copyRunsc writes runsc with extra appended at dst: another build, by its
// hash, that runs as runsc does.
func copyRunsc(t *testing.T, runsc, dst, extra string) {
	t.Helper()
	in, err := os.Open(runsc)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if _, err := out.WriteString(extra); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func imageBuild(t *testing.T, image string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(image, imageRecordName))
	if err != nil {
		t.Fatal(err)
	}
	var rec imageRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	return rec.Runsc
}

// TestUnrecordedBuildFound: a sandbox booted by a Lizard that neither kept
// nor recorded its runsc build, still running when the server comes back
// with another runsc and the first binary deleted (an upgrade from such a
// release), is found to run its Sentry's build: kept from /proc/PID/exe,
// recorded, run for its runsc calls, and named by its next image — not
// taken for the new build's, whose restore of that image could fail.
func TestUnrecordedBuildFound(t *testing.T) {
	testenv.RequiresRoot(t)
	ctx := context.Background()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	old := filepath.Join(t.TempDir(), "runsc")
	copyRunsc(t, testenv.Runsc(t), old, "an unrecorded build")
	rOld, err := New(Config{Runsc: old, Dir: dir, Logger: log, SpareNetworks: -1})
	if err != nil {
		t.Fatal(err)
	}
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	t.Cleanup(func() { rOld.Kill(ctx, spec.ID) })
	if err := rOld.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
	// What such a release left: a record without the build, nothing kept.
	recPath := filepath.Join(rOld.dir(spec.ID), recordName)
	rec, err := readRecord(recPath)
	if err != nil {
		t.Fatal(err)
	}
	rec.Runsc = ""
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(recPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "runsc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(old); err != nil {
		t.Fatal(err)
	}

	r, err := New(Config{Runsc: testenv.Runsc(t), Dir: dir, Logger: log, SpareNetworks: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	want := KeptRunsc(dir, rOld.ImageKey())
	if got := r.runscOf(spec.ID); got != want {
		t.Fatalf("runsc for the unrecorded sandbox = %s; want its Sentry's build kept, %s", got, want)
	}
	if _, err := os.Stat(want); err != nil {
		t.Fatalf("its build is not kept: %v", err)
	}
	if rec, err := readRecord(recPath); err != nil || rec.Runsc != rOld.ImageKey() {
		t.Errorf("its record after = %+v, %v; want it to name %s", rec, err, rOld.ImageKey())
	}
	image := filepath.Join(t.TempDir(), "image")
	if err := r.Checkpoint(ctx, spec.ID, image, false); err != nil {
		t.Fatal(err)
	}
	if got := imageBuild(t, image); got != rOld.ImageKey() {
		t.Errorf("its image names build %q; want %q", got, rOld.ImageKey())
	}
	// And that image restores, by the kept build.
	if err := r.Restore(ctx, spec, image); err != nil {
		t.Fatalf("Restore: %v", err)
	}
	if err := sandboxtest.WaitReady(spec.Network, sandboxtest.ReadyTimeout); err != nil {
		t.Fatal(err)
	}
}
