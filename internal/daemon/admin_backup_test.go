package daemon

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/secrets"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestAdminBackupS3: `lizard admin backup --to s3://BUCKET/PREFIX` uploads
// the backup as one image sealed with the secrets key (the bucket holds
// no file of it in clear), refuses a prefix that holds one already, and
// `lizard admin restore --from s3://...` needs the key apart, downloads it
// and restores it: the project is there, the agent key and the kept agent
// (executable) are back. A prefix without a backup is said to hold none.
func TestAdminBackupS3(t *testing.T) {
	s3 := testenv.S3Server(t)
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	ctx := context.Background()
	dir := t.TempDir()
	if _, _, err := runCLI(t, "admin", "create-project", "--data-dir", dir, "--id", "p1", "--json"); err != nil {
		t.Fatal(err)
	}
	if _, err := secrets.LoadOrCreateKey(filepath.Join(dir, secrets.KeyFile)); err != nil {
		t.Fatal(err)
	}
	agentKey := []byte("agent-key-" + strings.Repeat("k", 22))
	agent := filepath.Join(dir, "gvisor/files/0.1.0-0123456789abcdef/lizard-agent")
	os.MkdirAll(filepath.Dir(agent), 0o755)
	if err := os.WriteFile(filepath.Join(dir, "agent.key"), agentKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agent, []byte("#!agent"), 0o755); err != nil {
		t.Fatal(err)
	}
	url := "s3://" + s3.Bucket + "/backups/one"
	keyTo := filepath.Join(t.TempDir(), "secrets.key")
	out, _, err := runCLI(t, "admin", "backup", "--data-dir", dir, "--to", url, "--secrets-key-to", keyTo)
	if err != nil || !strings.Contains(out, "Uploaded") {
		t.Fatalf("backup --to %s: %q, %v", url, out, err)
	}
	// Nothing of it in clear in the bucket, nor left staged.
	filepath.WalkDir(s3.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, agentKey) || bytes.Contains(b, []byte("#!agent")) {
				t.Errorf("the bucket holds %s in clear", p)
			}
		}
		return nil
	})
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), ".lizard-backup-*")); len(left) > 0 {
		t.Errorf("staging left behind: %v", left)
	}
	if _, _, err := runCLI(t, "admin", "backup", "--data-dir", dir, "--to", url); err == nil || !strings.Contains(err.Error(), "holds a backup already") {
		t.Errorf("a second backup to %s: %v; want it refused", url, err)
	}

	dst := filepath.Join(t.TempDir(), "restored")
	if _, _, err := runCLI(t, "admin", "restore", "--from", url, "--data-dir", dst); cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--secrets-key-from") {
		t.Errorf("restore from %s without the key: %v; want a usage error asking for it", url, err)
	}
	if _, _, err := runCLI(t, "admin", "restore", "--from", "s3://"+s3.Bucket+"/backups/none", "--data-dir", dst, "--secrets-key-from", keyTo); err == nil || !strings.Contains(err.Error(), "holds no backup") {
		t.Errorf("restore from an empty prefix: %v; want it said", err)
	}
	out, _, err = runCLI(t, "admin", "restore", "--from", url, "--data-dir", dst, "--secrets-key-from", keyTo, "--cache-dir", t.TempDir())
	if err != nil {
		t.Fatalf("restore --from %s: %q, %v", url, out, err)
	}
	st, err := store.Open(ctx, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.GetProject(ctx, "p1"); err != nil {
		t.Errorf("project p1 after the restore: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dst, "agent.key")); err != nil || !bytes.Equal(b, agentKey) {
		t.Errorf("agent.key after the restore: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(dst, "gvisor/files/0.1.0-0123456789abcdef/lizard-agent")); err != nil || fi.Mode().Perm()&0o100 == 0 {
		t.Errorf("the kept agent after the restore: %v, %v; want it executable", fi, err)
	}
}
