// Package testenv says what a test needs from the machine. Tests that need
// root, runsc or a built template call these helpers: they skip when run by
// hand without what they need, and fail instead when LIZARD_TEST_STRICT=1,
// which `make test` sets, so CI never counts a skipped test as passing.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Strict reports whether missing prerequisites fail tests instead of skipping them.
func Strict() bool { return os.Getenv("LIZARD_TEST_STRICT") == "1" }

func missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if Strict() {
		t.Fatalf("LIZARD_TEST_STRICT=1 but "+format, args...)
	}
	t.Skipf(format, args...)
}

// RequiresRoot skips (or, strict, fails) the test unless it runs as root.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "test needs root")
	}
}

// RepoRoot returns the repository's top directory.
func RepoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Runsc returns the runsc binary to test with: $LIZARD_RUNSC, else bin/runsc
// of the repository (built by `make build`).
func Runsc(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LIZARD_RUNSC")
	if p == "" {
		p = filepath.Join(RepoRoot(t), "bin", "runsc")
	}
	if _, err := os.Stat(p); err != nil {
		missing(t, "no runsc at %s (run `make build` or set LIZARD_RUNSC)", p)
	}
	return p
}

// Binary returns bin/NAME of the repository, built by `make build`.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(RepoRoot(t), "bin", name)
	if _, err := os.Stat(p); err != nil {
		missing(t, "no %s (run `make build`)", p)
	}
	return p
}

// Python returns a Python interpreter with ipykernel and the data stack
// installed: $LIZARD_TEST_PYTHON, set by `make test` to a venv it prepares.
func Python(t testing.TB) string {
	t.Helper()
	p := os.Getenv("LIZARD_TEST_PYTHON")
	if p == "" {
		missing(t, "LIZARD_TEST_PYTHON is not set (run the tests with `make test`)")
	}
	if _, err := exec.LookPath(p); err != nil {
		missing(t, "LIZARD_TEST_PYTHON=%s: %v", p, err)
	}
	return p
}

// Tool returns the path of a program the test runs (gcc, objcopy),
// skipping (or, strict, failing) when it is not on the PATH.
func Tool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		missing(t, "no %s on the PATH (apt-get install it)", name)
	}
	return p
}
