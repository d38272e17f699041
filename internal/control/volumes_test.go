package control_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
)

// fakeVolumes keeps volumes as names, for the control plane's rules; the
// real filesystems are e2e's (TestVolumes).
type fakeVolumes struct {
	dir string
	mu  sync.Mutex
	m   map[string]int64
}

func (f *fakeVolumes) Create(_ context.Context, id string, size int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[id] = size
	return nil
}
func (f *fakeVolumes) Mount(context.Context, string) error { return nil }
func (f *fakeVolumes) Remove(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
	return nil
}
func (f *fakeVolumes) Path(id string) string            { return filepath.Join(f.dir, id) }
func (f *fakeVolumes) UnmountAll(map[string]bool) error { return nil }

func TestVolumeRules(t *testing.T) {
	fv := &fakeVolumes{dir: t.TempDir(), m: map[string]int64{}}
	e := newEnv(t, nil, func(c *node.Config) { c.Volumes = fv })
	ctx := context.Background()
	v, err := e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data", SizeMb: 64})
	if err != nil || fv.m[v.VolumeID] != 64<<20 {
		t.Fatalf("CreateVolume = %+v, %v; made %v", v, err, fv.m)
	}
	for _, tc := range []struct {
		req  api.CreateVolumeRequest
		want error
	}{
		{api.CreateVolumeRequest{Name: "data"}, errdefs.ErrConflict},
		{api.CreateVolumeRequest{Name: "../x"}, errdefs.ErrInvalid},
		{api.CreateVolumeRequest{Name: "x", SizeMb: 8}, errdefs.ErrInvalid},
		{api.CreateVolumeRequest{Name: "x", SizeMb: 1 << 20}, errdefs.ErrInvalid},
	} {
		if _, err := e.c.Project("p1").Volumes().Create(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("CreateVolume(%+v) = %v; want %v", tc.req, err, tc.want)
		}
	}
	for _, tc := range []struct {
		mounts []api.VolumeMount
		want   error
	}{
		{[]api.VolumeMount{{Name: "data", Path: "/usr/lib/x"}}, errdefs.ErrInvalid},
		{[]api.VolumeMount{{Name: "data", Path: "/mnt/a/"}}, errdefs.ErrInvalid},
		{[]api.VolumeMount{{Name: "data", Path: "/mnt/a"}, {Name: "data", Path: "/mnt/b"}}, errdefs.ErrInvalid},
		{[]api.VolumeMount{{Name: "nope", Path: "/mnt/a"}}, errdefs.ErrNotFound},
	} {
		if _, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{Volumes: tc.mounts}); !errors.Is(err, tc.want) {
			t.Errorf("create with volumes %+v = %v; want %v", tc.mounts, err, tc.want)
		}
	}
	if _, err := e.c.Create(ctx, "p2", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/mnt/d"}}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another project mounting data = %v; want not found", err)
	}

	sb := e.create(t, "p1", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: "/home/user/data"}}})
	creates := e.Runtime.Creates()
	last := creates[len(creates)-1]
	if len(last.Volumes) != 1 || last.Volumes[0].Source != fv.Path(v.VolumeID) || last.Volumes[0].Target != "/home/user/data" {
		t.Errorf("the booted spec's volumes = %+v; want the volume's host path at /home/user/data", last.Volumes)
	}
	if err := e.c.Project("p1").Volumes().Delete(ctx, "data"); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), sb.SandboxID) {
		t.Errorf("DeleteVolume while mounted = %v; want a conflict naming %s", err, sb.SandboxID)
	}
	if _, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("Snapshot of a sandbox with a volume = %v; want a conflict", err)
	}
	// Its image is never uploaded (it restores only beside its volumes):
	// waitDurable is refused at once, the sandbox left running.
	if _, err := e.c.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{WaitDurable: true}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "without waitDurable") {
		t.Errorf("Pause with waitDurable of a sandbox with a volume = %v; want a conflict saying to pause without it", err)
	}
	if got, err := e.c.Get(ctx, "p1", sb.SandboxID); err != nil || got.State != api.StateRunning {
		t.Errorf("after the refused pause: %+v, %v; want running", got, err)
	}
	// Pause and resume, fork: each restore mounts the volume again.
	if _, err := e.c.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := e.c.Project("p1").Volumes().Delete(ctx, "data"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("DeleteVolume while a paused sandbox mounts it = %v; want a conflict", err)
	}
	if _, err := e.c.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	forks, err := e.c.Fork(ctx, "p1", sb.SandboxID, api.ForkRequest{})
	if err != nil {
		t.Fatal(err)
	}
	rs := e.Runtime.Restores()
	if len(rs) < 2 {
		t.Fatalf("restores = %d; want the resume's and the fork's", len(rs))
	}
	for _, r := range rs[len(rs)-2:] {
		if len(r.Spec.Volumes) != 1 || r.Spec.Volumes[0].Target != "/home/user/data" {
			t.Errorf("restore of %s: volumes %+v; want the volume again", r.Spec.ID, r.Spec.Volumes)
		}
	}
	if len(forks) != 1 || len(forks[0].Volumes) != 1 {
		t.Errorf("fork = %+v; want it to mount the volume", forks)
	}
	for _, id := range []string{sb.SandboxID, forks[0].SandboxID} {
		if err := e.c.Kill(ctx, "p1", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.c.Project("p1").Volumes().Delete(ctx, "data"); err != nil || len(fv.m) != 0 {
		t.Errorf("DeleteVolume once unmounted = %v; volumes left %v", err, fv.m)
	}
}

// TestVolumeMountPaths: a volume may not be mounted where it would hide
// what the sandbox's system or Lizard needs — a reserved directory, a
// path inside one, or an ancestor of one (a volume at /opt held a
// lizard/bin/lizard-agent of the caller's, run as root) — nor at a path
// that is not clean. Paths that only look like reserved ones are fine.
func TestVolumeMountPaths(t *testing.T) {
	fv := &fakeVolumes{dir: t.TempDir(), m: map[string]int64{}}
	e := newEnv(t, nil, func(c *node.Config) { c.Volumes = fv })
	ctx := context.Background()
	if _, err := e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "data", SizeMb: 64}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		// Reserved, inside one, an ancestor of one, the root.
		{"/opt/lizard", false},
		{"/opt/lizard/bin", false},
		{"/usr/local/bin", false},
		{"/etc", false},
		{"/proc/self", false},
		{"/opt", false},
		{"/", false},
		// Not clean, not absolute, not a path.
		{"/opt/lizard/..", false},
		{"/opt/../opt", false},
		{"/mnt/x/../../opt", false},
		{"//opt", false},
		{"/opt/", false},
		{"/mnt/./x", false},
		{"/mnt/x/", false},
		{"opt", false},
		{"", false},
		{"/mnt/a\x00b", false},
		{"/mnt/a\nb", false},
		{"/mnt/a,b", false},
		{"/mnt/" + strings.Repeat("x", 256), false},
		{"/mnt/" + strings.Repeat("x/", 600), false},
		// Allowed, some only resembling reserved paths.
		{"/optx", true},
		{"/opt2/lizard", true},
		{"/home/user/opt", true},
		{"/home/user/opt/lizard", true},
		{"/home/user", true},
		{"/home", true},
		{"/mnt/data", true},
		{"/mnt/" + strings.Repeat("x", 255), true},
	} {
		_, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{Volumes: []api.VolumeMount{{Name: "data", Path: tc.path}}})
		switch {
		case tc.ok && err != nil:
			t.Errorf("mount at %q: %v; want it allowed", tc.path, err)
		case !tc.ok && !errors.Is(err, errdefs.ErrInvalid):
			t.Errorf("mount at %q: %v; want invalid", tc.path, err)
		case !tc.ok && !strings.Contains(errdefs.Message(err), fmt.Sprintf("%q", tc.path)):
			t.Errorf("mount at %q: message %q does not name the path", tc.path, errdefs.Message(err))
		}
	}
}

// TestVolumeBounds: a project's volumes are bounded in number and in
// size added up, and the disk it is promised — live sandboxes' diskMb
// plus volumes — is bounded too; each refusal is a 429 that names the
// bound and how to make room, and a delete or a kill makes it.
func TestVolumeBounds(t *testing.T) {
	fv := &fakeVolumes{dir: t.TempDir(), m: map[string]int64{}}
	e := newEnv(t, func(c *control.Config) {
		c.MaxVolumes, c.MaxVolumeTotalBytes, c.Quota.MaxDisk = 3, 200<<20, 2250<<20
	}, func(c *node.Config) { c.Volumes = fv })
	ctx := context.Background()
	mk := func(name string, mb int64) error {
		_, err := e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: name, SizeMb: mb})
		return err
	}
	refused := func(what string, err error, words ...string) {
		t.Helper()
		if !errors.Is(err, errdefs.ErrRateLimited) {
			t.Errorf("%s: %v; want rate limited (429)", what, err)
			return
		}
		for _, w := range words {
			if !strings.Contains(errdefs.Message(err), w) {
				t.Errorf("%s: message %q; want it to say %q", what, errdefs.Message(err), w)
			}
		}
	}
	for i, mb := range []int64{64, 64, 64} {
		if err := mk(fmt.Sprintf("v%d", i), mb); err != nil {
			t.Fatalf("volume %d of 3: %v", i, err)
		}
	}
	refused("a 4th volume", mk("v3", 16), "3 volumes", "--max-volumes-per-project", "delete one")
	if err := e.c.Project("p1").Volumes().Delete(ctx, "v2"); err != nil {
		t.Fatal(err)
	}
	refused("128 MiB past 200 MiB in all", mk("v2", 128), "128 MiB", "200 MiB", "--max-volume-total-mb", "delete a volume")
	if err := mk("v2", 72); err != nil {
		t.Fatalf("a volume that fits the total exactly: %v", err)
	}
	// Another project's bounds are its own.
	if _, err := e.c.Project("p2").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "v0", SizeMb: 64}); err != nil {
		t.Errorf("p2's first volume: %v", err)
	}

	// Promised disk: 200 MiB of volumes, then sandboxes of 1 GiB each
	// within 2250 MiB: two fit, the third does not, by any path; a
	// volume's delete makes room for a small sandbox, not for another
	// volume, which a kill makes.
	a := e.create(t, "p1", api.CreateSandboxRequest{})
	e.create(t, "p1", api.CreateSandboxRequest{})
	_, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{})
	refused("a sandbox past the disk promised", err, "2248 MiB", "--max-disk-per-project-mb", "kill sandboxes or delete volumes")
	_, err = e.c.Fork(ctx, "p1", a.SandboxID, api.ForkRequest{})
	refused("a fork past the disk promised", err, "--max-disk-per-project-mb")
	if err := e.c.Project("p1").Volumes().Delete(ctx, "v0"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{DiskMb: ms(16)}); err != nil {
		t.Fatalf("a sandbox of 16 MiB, within the promise once a volume went: %v", err)
	}
	refused("a volume past the disk promised", mk("v0", 60), "--max-disk-per-project-mb")
	if err := e.c.Kill(ctx, "p1", a.SandboxID); err != nil {
		t.Fatal(err)
	}
	if err := mk("v0", 60); err != nil {
		t.Errorf("a volume once a sandbox was killed: %v", err)
	}
}

// TestVolumeBoundsRace: concurrent creates racing for the last slots of
// a project get exactly the slots there are.
func TestVolumeBoundsRace(t *testing.T) {
	fv := &fakeVolumes{dir: t.TempDir(), m: map[string]int64{}}
	const max = 5
	e := newEnv(t, func(c *control.Config) { c.MaxVolumes = max }, func(c *node.Config) { c.Volumes = fv })
	ctx := context.Background()
	if _, err := e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "first", SizeMb: 16}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: fmt.Sprintf("v%d", i), SizeMb: 16})
		}()
	}
	wg.Wait()
	made := 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case !errors.Is(err, errdefs.ErrRateLimited):
			t.Errorf("a racing create: %v; want made or rate limited", err)
		}
	}
	vs, err := e.c.Project("p1").Volumes().List(ctx)
	if made != max-1 || err != nil || len(vs) != max || len(fv.m) != max {
		t.Errorf("%d racing creates made %d, project lists %d (%v), node has %d; want %d, %d, %d", len(errs), made, len(vs), err, len(fv.m), max-1, max, max)
	}
}

// TestVolumeHostDisk: a volume is sparse, so any size would be made at
// once; one the node's disk could not hold beside what it keeps free is
// refused as a full disk, and nothing is recorded or made.
func TestVolumeHostDisk(t *testing.T) {
	free, err := node.FreeBytes(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// Halves and quarters: other processes may write meanwhile.
	fv := &fakeVolumes{dir: t.TempDir(), m: map[string]int64{}}
	e := newEnv(t, func(c *control.Config) { c.MaxVolumeBytes = 1 << 50 }, func(c *node.Config) { c.Volumes = fv; c.MinFreeDisk = free / 2 })
	ctx := context.Background()
	mb := free / 4 * 3 >> 20 // fits the disk, not beside the half kept
	_, err = e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "huge", SizeMb: mb})
	if !errors.Is(err, errdefs.ErrDiskFull) || !strings.Contains(errdefs.Message(err), "--min-free-disk-mb") {
		t.Errorf("a volume of %d MiB with %d MiB free: %v; want ErrDiskFull naming --min-free-disk-mb", mb, free>>20, err)
	}
	if vs, _ := e.c.Project("p1").Volumes().List(ctx); len(vs) != 0 || len(fv.m) != 0 {
		t.Errorf("after the refusal: recorded %v, made %v; want nothing", vs, fv.m)
	}
	if _, err := e.c.Project("p1").Volumes().Create(ctx, api.CreateVolumeRequest{Name: "small", SizeMb: 64}); err != nil {
		t.Errorf("a small volume: %v", err)
	}
}
