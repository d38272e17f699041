package control_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/control"
	"github.com/lizard-build/lizard/internal/errdefs"
	"github.com/lizard-build/lizard/internal/node"
	"github.com/lizard-build/lizard/internal/node/nodetest"
	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/store"
)

func TestSnapshotsPerProject(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{})
	sn, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	dir := filepath.Join(e.DataDir, "snapshots", sn.SnapshotID)
	if !nodetest.Exists(dir) || sn.SizeBytes == 0 || !e.Runtime.IsRunning(sb.SandboxID) || sn.SandboxID != sb.SandboxID || sn.ProjectID != "p1" {
		t.Fatalf("snapshot %+v: image=%v; want p1's, of %s, an image on disk and the sandbox still running", sn, nodetest.Exists(dir), sb.SandboxID)
	}
	for name, err := range map[string]error{
		"Get":    func() error { _, err := e.c.Project("p2").Snapshots().Get(ctx, sn.SnapshotID); return err }(),
		"Delete": e.c.Project("p2").Snapshots().Delete(ctx, sn.SnapshotID),
		"Create": func() error {
			_, err := e.c.Create(ctx, "p2", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
			return err
		}(),
	} {
		if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(errdefs.Message(err), "not found in project p2") {
			t.Errorf("%s of p1's snapshot from p2 = %v; want ErrNotFound", name, err)
		}
	}
	if list, _ := e.c.Project("p2").Snapshots().List(ctx); len(list) != 0 {
		t.Errorf("p2 lists %d snapshots; want 0", len(list))
	}
	if list, _ := e.c.Project("p1").Snapshots().List(ctx); len(list) != 1 || list[0].SnapshotID != sn.SnapshotID {
		t.Errorf("p1 lists %+v; want its snapshot", list)
	}
	if !nodetest.Exists(dir) {
		t.Fatal("another project's delete removed the image")
	}
	// Its own project creates from it, then deletes it; the copy lives on.
	cp, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
	if err != nil || cp.State != api.StateRunning {
		t.Fatalf("Create from snapshot = %+v, %v", cp, err)
	}
	if rs := e.Runtime.Restores(); len(rs) != 1 || rs[0].Dir != dir || rs[0].Spec.ID != cp.SandboxID {
		t.Errorf("restores = %+v; want %s from %s", rs, cp.SandboxID, dir)
	}
	if err := e.c.Project("p1").Snapshots().Delete(ctx, sn.SnapshotID); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if nodetest.Exists(dir) {
		t.Error("DeleteSnapshot left the image directory")
	}
	if _, err := e.c.Project("p1").Snapshots().Get(ctx, sn.SnapshotID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSnapshot after delete = %v; want ErrNotFound", err)
	}
	if !e.Runtime.IsRunning(cp.SandboxID) {
		t.Error("deleting the snapshot ended a sandbox made from it")
	}
}

func TestCreateFromSnapshotInvalid(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{})
	sn, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  api.CreateSandboxRequest
		want string
	}{
		{"other template", api.CreateSandboxRequest{Template: "other"}, "differs from snapshot"},
		{"envs", api.CreateSandboxRequest{Envs: map[string]string{"A": "1"}}, "cannot be set when creating from a snapshot"},
		{"lizardToken", api.CreateSandboxRequest{LizardToken: true}, "cannot be set when creating from a snapshot"},
		{"timeout", api.CreateSandboxRequest{TimeoutMs: ms(-5)}, "out of range"},
		{"onTimeout", api.CreateSandboxRequest{OnTimeout: "nap"}, "onTimeout"},
	}
	for _, tt := range tests {
		tt.req.SnapshotID = sn.SnapshotID
		if _, err := e.c.Create(ctx, "p1", tt.req); !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(errdefs.Message(err), tt.want) {
			t.Errorf("%s: Create = %v; want ErrInvalid saying %q", tt.name, err, tt.want)
		}
	}
	if n := len(e.Runtime.Restores()); n != 0 {
		t.Errorf("invalid creates restored %d sandboxes", n)
	}
}

func wantShape(t *testing.T, what string, spec sandbox.Spec, memory int64, internet bool) {
	t.Helper()
	if spec.Limits.MemoryBytes != memory || spec.Network.Internet != internet || spec.Limits.CPUs != 1 {
		t.Errorf("%s: limits %+v, internet %v; want memory %d, 1 CPU, internet %v", what, spec.Limits, spec.Network.Internet, memory, internet)
	}
}

// TestRestoresKeepShape checks that resume, snapshot restores and forks
// run with the limits and egress the sandbox was created with.
func TestRestoresKeepShape(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	no := false
	sb := e.create(t, "p1", api.CreateSandboxRequest{MemoryMb: ms(256), AllowInternet: &no, LizardToken: true})
	const mem = 256 << 20
	wantShape(t, "boot", e.Runtime.Creates()[0], mem, false)
	row := e.Row(t, sb.SandboxID)
	if want := (store.Shape{MemoryBytes: mem, CPUs: 1, DiskBytes: 1 << 30, Token: true, Recorded: true}); !reflect.DeepEqual(row.Shape, want) {
		t.Errorf("recorded shape = %+v, want %+v", row.Shape, want)
	}
	if _, err := e.c.Pause(ctx, "p1", sb.SandboxID, api.PauseRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Resume(ctx, "p1", sb.SandboxID, api.ResumeRequest{}); err != nil {
		t.Fatal(err)
	}
	wantShape(t, "resume", e.Runtime.Restores()[0].Spec, mem, false)
	sn, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if snRow, _ := e.Store.GetSnapshot(ctx, sn.SnapshotID); !reflect.DeepEqual(snRow.Shape, row.Shape) {
		t.Errorf("snapshot shape = %+v, want the sandbox's %+v", snRow.Shape, row.Shape)
	}
	fromSnap := e.create(t, "p1", api.CreateSandboxRequest{SnapshotID: sn.SnapshotID})
	wantShape(t, "create from snapshot", e.Runtime.Restores()[1].Spec, mem, false)
	forks, err := e.c.Fork(ctx, "p1", sb.SandboxID, api.ForkRequest{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Runtime.Restores()[2:] {
		wantShape(t, "fork", r.Spec, mem, false)
	}
	// A new sandbox gets its own identity, and loses its source's token:
	// no key, no API port.
	for _, id := range []string{fromSnap.SandboxID, forks[0].SandboxID, forks[1].SandboxID} {
		rs := e.Agent.Reseeds(id)
		if len(rs) != 1 || rs[0].Envs["LIZARD_SANDBOX_ID"] != id || !slices.Contains(rs[0].Unset, "LIZARD_API_KEY") || rs[0].KeepSeeds {
			t.Errorf("reseeds of %s = %+v; want one with its ID, unsetting LIZARD_API_KEY, reseeding", id, rs)
		}
		if has, _ := e.Store.SandboxHasLiveKey(ctx, id, time.Now()); has || e.Row(t, id).Shape.Token {
			t.Errorf("copy %s holds a lizardToken", id)
		}
	}
	for _, r := range e.Runtime.Restores()[1:] {
		if r.Spec.Network.APIPort != 0 {
			t.Errorf("copy %s restored with API port %d; want none", r.Spec.ID, r.Spec.Network.APIPort)
		}
	}
}

func TestForkCount(t *testing.T) {
	tests := []struct {
		count   int
		want    int
		wantErr error
	}{
		{0, 1, nil},
		{1, 1, nil},
		{3, 3, nil},
		{node.MaxForks, node.MaxForks, nil},
		{node.MaxForks + 1, 0, errdefs.ErrInvalid},
		{-1, 0, errdefs.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("count %d", tt.count), func(t *testing.T) {
			e := newEnv(t, nil)
			ctx := context.Background()
			parent := e.create(t, "p1", api.CreateSandboxRequest{Metadata: map[string]string{"role": "parent"}})
			got, err := e.c.Fork(ctx, "p1", parent.SandboxID, api.ForkRequest{Count: tt.count, Metadata: map[string]string{"role": "fork"}, TimeoutMs: ms(60_000)})
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || !strings.Contains(errdefs.Message(err), "out of range") {
					t.Errorf("Fork(count %d) = %v; want %v saying out of range", tt.count, err, tt.wantErr)
				}
				if n := len(e.Runtime.Restores()); n != 0 {
					t.Errorf("an invalid fork restored %d sandboxes", n)
				}
				return
			}
			if err != nil || len(got) != tt.want {
				t.Fatalf("Fork(count %d) = %d sandboxes, %v; want %d", tt.count, len(got), err, tt.want)
			}
			for _, f := range got {
				if f.State != api.StateRunning || f.ProjectID != "p1" || f.Metadata["role"] != "fork" || f.TimeoutMs != 60_000 || f.SandboxID == parent.SandboxID {
					t.Errorf("fork %+v; want a new running p1 sandbox with the fork's metadata and timeout", f)
				}
			}
			if left, _ := os.ReadDir(filepath.Join(e.DataDir, "snapshots")); len(left) != 0 {
				t.Errorf("the fork's image was left on disk: %d entries", len(left))
			}
		})
	}
}

// TestSnapshotsBound: a project keeps at most MaxSnapshotsPerProject
// snapshots (images on the server's disk no other bound counts); deleting
// one makes room, and another project is not counted with it.
func TestSnapshotsBound(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{})
	var first string
	for i := range control.MaxSnapshotsPerProject {
		sn, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
		if err != nil {
			t.Fatalf("snapshot %d: %v", i+1, err)
		}
		if i == 0 {
			first = sn.SnapshotID
		}
	}
	_, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{})
	if !errors.Is(err, errdefs.ErrRateLimited) || !strings.Contains(errdefs.Message(err), "100 snapshots, its maximum") {
		t.Errorf("snapshot %d of a project: %v; want rate_limited naming the bound", control.MaxSnapshotsPerProject+1, err)
	}
	other := e.create(t, "p2", api.CreateSandboxRequest{})
	if _, err := e.c.Snapshot(ctx, "p2", other.SandboxID, api.SnapshotRequest{}); err != nil {
		t.Errorf("another project's snapshot: %v", err)
	}
	if err := e.c.Project("p1").Snapshots().Delete(ctx, first); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{}); err != nil {
		t.Errorf("a snapshot once one was deleted: %v", err)
	}
}

// TestSnapshotNames: a snapshot taken with a name is found and created
// from by that name in its project only; the name given again moves to
// the newer snapshot, the older one staying under its ID; a name that is
// not one is refused before anything is taken.
func TestSnapshotNames(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	sb := e.create(t, "p1", api.CreateSandboxRequest{})
	first, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{Name: "base_v1.x"})
	if err != nil || first.Name != "base_v1.x" {
		t.Fatalf("named Snapshot = %+v, %v", first, err)
	}
	if got, err := e.c.Project("p1").Snapshots().Get(ctx, "base_v1.x"); err != nil || got.SnapshotID != first.SnapshotID {
		t.Errorf("GetSnapshot by name = %+v, %v; want %s", got, err, first.SnapshotID)
	}
	if _, err := e.c.Project("p2").Snapshots().Get(ctx, "base_v1.x"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("p1's name from p2 = %v; want ErrNotFound", err)
	}
	cp, err := e.c.Create(ctx, "p1", api.CreateSandboxRequest{SnapshotID: "base_v1.x"})
	if err != nil || cp.State != api.StateRunning {
		t.Fatalf("Create from a snapshot's name = %+v, %v", cp, err)
	}
	second, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{Name: "base_v1.x"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.c.Project("p1").Snapshots().Get(ctx, "base_v1.x"); got.SnapshotID != second.SnapshotID {
		t.Errorf("the name names %s after it was given again; want the newer %s", got.SnapshotID, second.SnapshotID)
	}
	if got, err := e.c.Project("p1").Snapshots().Get(ctx, first.SnapshotID); err != nil || got.Name != "" {
		t.Errorf("the older snapshot = %+v, %v; want it kept, unnamed", got, err)
	}
	// Deleted by its name: the row and the image.
	if err := e.c.Project("p1").Snapshots().Delete(ctx, "base_v1.x"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Project("p1").Snapshots().Get(ctx, second.SnapshotID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("after deleting by name, its snapshot = %v; want not found", err)
	}
	if nodetest.Exists(filepath.Join(e.DataDir, "snapshots", second.SnapshotID)) {
		t.Error("deleting by name left the image")
	}
	before, _ := e.c.Project("p1").Snapshots().List(ctx)
	for _, name := range []string{"-lead", "has space", "a/b", "x:tag", strings.Repeat("n", 129)} {
		if _, err := e.c.Snapshot(ctx, "p1", sb.SandboxID, api.SnapshotRequest{Name: name}); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("Snapshot named %q = %v; want invalid argument", name, err)
		}
	}
	if after, _ := e.c.Project("p1").Snapshots().List(ctx); len(after) != len(before) {
		t.Errorf("refused names took %d snapshots", len(after)-len(before))
	}
}
