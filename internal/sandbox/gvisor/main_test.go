package gvisor

import (
	"os"
	"testing"

	"github.com/lizard-build/lizard/internal/netns"
)

// TestMain removes the spare networks the tests' runtimes made (New keeps
// some ready, named after this process), as a stopping server does.
func TestMain(m *testing.M) {
	code := m.Run()
	netns.Drain()
	os.Exit(code)
}
