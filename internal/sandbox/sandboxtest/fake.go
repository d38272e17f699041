package sandboxtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// Fake is an in-memory sandbox.Runtime for unit tests of what sits above a
// runtime, the one every such test shares. Its methods call the function
// fields, which NewFake fills with the in-memory behaviour; a test
// replaces one to inject a failure.
type Fake struct {
	CreateFunc     func(ctx context.Context, spec sandbox.Spec) error
	RestoreFunc    func(ctx context.Context, spec sandbox.Spec, dir string) error
	CheckpointFunc func(ctx context.Context, id, dir string, leaveRunning bool) error
	StateFunc      func(ctx context.Context, id string) (sandbox.State, error)
	KillFunc       func(ctx context.Context, id string) error
	ListFunc       func(ctx context.Context) ([]string, error)
	ForegroundFunc func(ctx context.Context, id string) error

	mu       sync.Mutex
	running  map[string]sandbox.Spec
	killed   []string
	fronted  []string
	created  []sandbox.Spec
	restored []Restore
}

// Restore is one Restore call the fake saw.
type Restore struct {
	Spec sandbox.Spec
	Dir  string
}

var (
	_ sandbox.Runtime     = (*Fake)(nil)
	_ sandbox.Prioritizer = (*Fake)(nil)
)

// NewFake returns a Fake whose sandboxes run until killed, and whose
// checkpoints are a file naming the sandbox in the image directory.
func NewFake() *Fake {
	f := &Fake{running: map[string]sandbox.Spec{}}
	f.CreateFunc = func(_ context.Context, spec sandbox.Spec) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.running[spec.ID] = spec
		f.created = append(f.created, spec)
		return nil
	}
	f.RestoreFunc = func(_ context.Context, spec sandbox.Spec, dir string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.running[spec.ID] = spec
		f.restored = append(f.restored, Restore{spec, dir})
		return nil
	}
	f.CheckpointFunc = func(_ context.Context, id, dir string, _ bool) error {
		if !f.IsRunning(id) {
			return sandbox.ErrNotFound
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "image"), []byte(id), 0o600)
	}
	f.StateFunc = func(_ context.Context, id string) (sandbox.State, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.running[id]; ok {
			return sandbox.Running, nil
		}
		return "", sandbox.ErrNotFound
	}
	f.KillFunc = func(_ context.Context, id string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.running, id)
		f.killed = append(f.killed, id)
		return nil
	}
	f.ListFunc = func(context.Context) ([]string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		var ids []string
		for id := range f.running {
			ids = append(ids, id)
		}
		return ids, nil
	}
	f.ForegroundFunc = func(_ context.Context, id string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, ok := f.running[id]; !ok {
			return sandbox.ErrNotFound
		}
		f.fronted = append(f.fronted, id)
		return nil
	}
	return f
}

func (f *Fake) Name() string     { return "fake" }
func (f *Fake) ImageKey() string { return "fake" }
func (f *Fake) Create(ctx context.Context, spec sandbox.Spec) error {
	return f.CreateFunc(ctx, spec)
}
func (f *Fake) Restore(ctx context.Context, spec sandbox.Spec, dir string) error {
	return f.RestoreFunc(ctx, spec, dir)
}
func (f *Fake) Checkpoint(ctx context.Context, id, dir string, leaveRunning bool) error {
	return f.CheckpointFunc(ctx, id, dir, leaveRunning)
}
func (f *Fake) State(ctx context.Context, id string) (sandbox.State, error) {
	return f.StateFunc(ctx, id)
}
func (f *Fake) Kill(ctx context.Context, id string) error  { return f.KillFunc(ctx, id) }
func (f *Fake) Close(context.Context) error                { return nil }
func (f *Fake) List(ctx context.Context) ([]string, error) { return f.ListFunc(ctx) }
func (f *Fake) Foreground(ctx context.Context, id string) error {
	return f.ForegroundFunc(ctx, id)
}

// Stop makes sandbox id stop as if its processes died.
func (f *Fake) Stop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.running, id)
}

// Restores returns the Restore calls so far.
func (f *Fake) Restores() []Restore {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restored)
}

// Creates returns the specs Create was called with so far.
func (f *Fake) Creates() []sandbox.Spec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created)
}

// Foregrounded returns the sandboxes Foreground succeeded for so far.
func (f *Fake) Foregrounded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.fronted)
}

// WasKilled reports whether Kill was called for id.
func (f *Fake) WasKilled(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.killed, id)
}

// IsRunning reports whether sandbox id runs.
func (f *Fake) IsRunning(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.running[id]
	return ok
}

// Kills is how many times Kill was called.
func (f *Fake) Kills() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.killed)
}

// Running is how many sandboxes run.
func (f *Fake) Running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.running)
}
