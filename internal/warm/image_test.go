package warm

import (
	"testing"

	"github.com/lizard-build/lizard/internal/sandbox"
)

// A template image restores only under the disk limit it was taken with:
// a create asking another disk gets no image, and boots.
func TestImageOnlyForItsDisk(t *testing.T) {
	def := sandbox.Limits{MemoryBytes: 512 << 20, CPUs: 1, DiskBytes: 1 << 30}
	p := New(Config{Limits: def})
	p.setImage("interpreter", "/data/templates/interpreter-0123456789abcdef")
	other := def
	other.DiskBytes = 256 << 20
	if got := p.Image("interpreter", other); got != "" {
		t.Errorf("image for diskMb 256 = %q; want none", got)
	}
	bigger := def
	bigger.MemoryBytes = 2 << 30 // memory and CPU are set at restore
	if got := p.Image("interpreter", bigger); got == "" {
		t.Error("no image for a sandbox asking more memory; want the template's")
	}
}
