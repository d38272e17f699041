package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// TestRestoreOtherBuild: an image whose record names another runsc build
// is refused with ErrOtherBuild, naming the image and both builds, before
// runsc is run (a failed restore would cost the image); one naming this
// build, or none (an older Lizard's), gets past the check.
func TestRestoreOtherBuild(t *testing.T) {
	r := newTestRuntime(t)
	for _, tt := range []struct {
		name, record string
		other        bool
	}{
		{"another build", `{"layout":0,"diskBytes":0,"runsc":"gvisor-0000000000000000","lizard":"0.0.9"}`, true},
		{"this build", `{"layout":0,"diskBytes":1,"runsc":"` + r.ImageKey() + `"}`, false},
		{"no build recorded", `{"layout":0,"diskBytes":1}`, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			img := t.TempDir()
			for name, data := range map[string]string{"checkpoint.img": "", imageRecordName: tt.record} {
				if err := os.WriteFile(filepath.Join(img, name), []byte(data), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A disk limit no record has: past checkBuild, checkDisk
			// refuses it, so nothing boots.
			spec := sandbox.Spec{ID: "other-build", Limits: sandbox.Limits{DiskBytes: 2}}
			err := r.Restore(context.Background(), spec, img)
			if got := errors.Is(err, sandbox.ErrOtherBuild); got != tt.other {
				t.Fatalf("Restore = %v; ErrOtherBuild %v, want %v", err, got, tt.other)
			}
			if tt.other {
				for _, want := range []string{img, "gvisor-0000000000000000", "Lizard 0.0.9", r.ImageKey()} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("Restore = %v; want it to name %s", err, want)
					}
				}
			} else if !errors.Is(err, sandbox.ErrImage) {
				t.Errorf("Restore = %v; want the disk check's ErrImage", err)
			}
		})
	}
}
