package testenv

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// SourceAt returns a new directory holding the repository's files at
// commit, taken from the clone's git history (git archive): an upgrade test
// builds an earlier Lizard from it. A clone without the commit — a shallow
// one — skips the test or, strict, fails it, saying how to fetch it.
func SourceAt(t testing.TB, commit string) string {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		missing(t, "no git on PATH to take commit %s from", commit)
	}
	root := RepoRoot(t)
	if out, err := exec.Command(git, "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		shallow, _ := exec.Command(git, "-C", root, "rev-parse", "--is-shallow-repository").Output()
		missing(t, "commit %s is not in the history of the clone at %s (shallow: %s; %v %s): "+
			"`git fetch --unshallow` (or a full clone) brings it", commit, root, strings.TrimSpace(string(shallow)), err, strings.TrimSpace(string(out)))
	}
	tmp := t.TempDir()
	tarball, dir := filepath.Join(tmp, "src.tar"), filepath.Join(tmp, "src")
	for _, args := range [][]string{
		{git, "-C", root, "archive", "-o", tarball, commit},
		{"mkdir", dir},
		{"tar", "-x", "-f", tarball, "-C", dir},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("taking commit %s out of %s: %s: %v\n%s", commit, root, strings.Join(args, " "), err, out)
		}
	}
	return dir
}
