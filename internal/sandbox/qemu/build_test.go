package qemu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// TestRestoreOtherBuild: an image whose record names another VM build is
// refused with ErrOtherBuild, naming the image and both builds, before
// any VM starts; one naming this build, or none (an older Lizard's), gets
// past the check.
func TestRestoreOtherBuild(t *testing.T) {
	r := newTestRuntime(t, t.TempDir())
	for _, tt := range []struct {
		name, record string
		other        bool
	}{
		{"another build", `{"memoryBytes":1,"cpus":1,"build":"qemu-tcg-00000000-00000000-r0"}`, true},
		{"this build", `{"memoryBytes":1,"cpus":1,"build":"` + r.imageKey + `"}`, false},
		{"no build recorded", `{"memoryBytes":1,"cpus":1}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := t.TempDir()
			for name, data := range map[string]string{imageMemory: "", imageDisk: "", imageRecordName: tt.record} {
				if err := os.WriteFile(filepath.Join(img, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A memory size no record has: past the build check, the
			// shape check refuses it, so nothing boots.
			err := r.Restore(context.Background(), sandbox.Spec{ID: "other-build"}, img)
			if got := errors.Is(err, sandbox.ErrOtherBuild); got != tt.other {
				t.Fatalf("Restore = %v; ErrOtherBuild %v, want %v", err, got, tt.other)
			}
			if tt.other {
				for _, want := range []string{img, "qemu-tcg-00000000-00000000-r0", r.imageKey} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Restore = %v; want it to name %s", err, want)
					}
				}
			} else if !errors.Is(err, sandbox.ErrImage) {
				t.Errorf("Restore = %v; want the shape check's ErrImage", err)
			}
		})
	}
}
