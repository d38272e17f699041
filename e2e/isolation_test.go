package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/client"
)

// countToken is Python run in a sandbox's kernel: how often the token
// (given in hex, so the code itself does not hold its bytes) appears twice
// in a row in the kernel's own memory, read through /proc/self/mem.
const countToken = `
def _lz_count(h):
    needle = bytes.fromhex(h) * 2
    n = 0
    with open('/proc/self/maps') as f:
        maps = f.read().splitlines()
    with open('/proc/self/mem', 'rb', 0) as mem:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split('-'))
            if 'r' not in perms or hi - lo > 1 << 30:
                continue
            try:
                mem.seek(lo)
                n += mem.read(hi - lo).count(needle)
            except (OSError, ValueError, OverflowError):
                pass
    return n
print(_lz_count(%q))
del _lz_count
`

// TestTemplateRestoresIsolated checks that sandboxes restored from one
// template snapshot share nothing writable, whatever the runtime shares
// between them to save memory (issue 25): what one writes into its memory
// (a kernel variable, an attribute of a module the template imported,
// whose pages came from the image, and a 32 MiB buffer) and into its files
// (a new file on the root filesystem, in /tmp and /dev/shm, and an edit of
// a file the template has) is not in the other, nor in a sandbox restored
// from the same image afterwards. The same scan in the writer finds its
// buffer, so the scan sees the memory it reads.
func TestTemplateRestoresIsolated(t *testing.T) {
	for _, rt := range []struct {
		name string
		args []string
	}{
		{"gvisor", nil},
		// The QEMU entry comes with its template memory sharing (issue 25).
	} {
		t.Run(rt.name, func(t *testing.T) {
			s := startServer(t, rt.args...)
			c := s.createProject("proj_iso_" + rt.name)
			s.waitLog(t, 1, "template snapshot made")
			a := newSandbox(t, c, api.CreateSandboxRequest{})
			b := newSandbox(t, c, api.CreateSandboxRequest{})
			image := restoredFrom(t, s, a.SandboxID)
			if got := restoredFrom(t, s, b.SandboxID); got != image {
				t.Fatalf("the two sandboxes were restored from %q and %q, want one image", image, got)
			}

			raw := make([]byte, 32)
			rand.Read(raw)
			tok := hex.EncodeToString(raw)
			run(t, c, a.SandboxID, "python", "import pandas\npandas.lz_iso = "+strconv.Quote(tok)+
				"\nlz_var = "+strconv.Quote(tok)+"\nlz_big = bytearray(bytes.fromhex("+strconv.Quote(tok)+") * ((32 << 20) // 32))")
			execOK(t, c, a.SandboxID, "bash", "-c", "set -e; for f in ~/lz_iso /tmp/lz_iso /dev/shm/lz_iso; do echo "+tok+" > $f; done; echo "+tok+" >> ~/.bashrc")

			if n := count(t, c, a.SandboxID, tok); n < 100000 {
				t.Fatalf("the writer's own scan finds its 32 MiB buffer %d times, want ~500000: the scan does not see the kernel's memory", n)
			}
			if got := files(t, c, a.SandboxID, tok); got != "/dev/shm/lz_iso /home/user/.bashrc /home/user/lz_iso /tmp/lz_iso" {
				t.Fatalf("the writer's files holding the token: %q", got)
			}

			// A sandbox restored from the image after the writes.
			cNew := newSandbox(t, c, api.CreateSandboxRequest{})
			if got := restoredFrom(t, s, cNew.SandboxID); got != image {
				t.Fatalf("the third sandbox was restored from %q, want %q", got, image)
			}
			for _, other := range []string{b.SandboxID, cNew.SandboxID} {
				ex := run(t, c, other, "python", "import pandas\nprint(getattr(pandas, 'lz_iso', None), 'lz_var' in globals(), 'lz_big' in globals())")
				if got := strings.TrimSpace(ex.Stdout); got != "None False False" {
					t.Errorf("%s sees the other's kernel: %q, want None False False", other, got)
				}
				// The needle itself is in the scanning kernel once or a few
				// times (copies in buffers the scan read); the buffer would be
				// a million.
				if n := count(t, c, other, tok); n > 64 {
					t.Errorf("%s's memory holds the other's buffer: the token %d times", other, n)
				}
				if got := files(t, c, other, tok); got != "" {
					t.Errorf("%s sees the other's files: %q", other, got)
				}
			}
		})
	}
}

// restoredFrom is the image the server logged restoring sandbox id from.
func restoredFrom(t *testing.T, s *server, id string) string {
	t.Helper()
	s.waitLog(t, 1, "sandbox restored", id, "/templates/interpreter-")
	for _, line := range strings.Split(s.logs(), "\n") {
		if !strings.Contains(line, "sandbox restored") || !strings.Contains(line, id) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "image="); ok {
				return v
			}
		}
	}
	t.Fatalf("no image in the server's restore line of %s", id)
	return ""
}

// count is how often the token appears twice in a row in the memory of
// sandbox id's kernel.
func count(t *testing.T, c *client.Client, id, tok string) int {
	t.Helper()
	out := strings.TrimSpace(run(t, c, id, "python", strings.Replace(countToken, "%q", strconv.Quote(tok), 1)).Stdout)
	n, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("the memory scan in %s printed %q", id, out)
	}
	return n
}

// files lists the files of sandbox id among those the test writes that hold
// the token, sorted and space-separated.
func files(t *testing.T, c *client.Client, id, tok string) string {
	t.Helper()
	out := execOK(t, c, id, "bash", "-c", "grep -l "+tok+" ~/lz_iso /tmp/lz_iso /dev/shm/lz_iso ~/.bashrc 2>/dev/null | sort; true")
	return strings.Join(strings.Fields(out), " ")
}
