package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lizard-build/lizard/internal/auth"
	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/store"
	"github.com/lizard-build/lizard/internal/warm"
)

func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = cli.Run(context.Background(), args, &out, &errb, Commands()...)
	return out.String(), errb.String(), err
}

func TestAdminCreateProjectAndKey(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	// The server holds the database open meanwhile.
	st, err := store.Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	v := &auth.Verifier{Store: st}

	out, _, err := runCLI(t, "admin", "create-project", "--data-dir", dir, "--id", "proj_123", "--json")
	if err != nil {
		t.Fatalf("create-project: %v", err)
	}
	var got adminKey
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.ProjectID != "proj_123" || !strings.HasPrefix(got.APIKey, "lz_") {
		t.Fatalf("create-project printed %q (%v); want projectId proj_123 and a lz_ key", out, err)
	}
	if p, err := v.Verify(ctx, got.APIKey); err != nil || p != "proj_123" {
		t.Fatalf("the printed key verifies as %q, %v; want proj_123", p, err)
	}

	_, _, err = runCLI(t, "admin", "create-project", "--data-dir", dir, "--id", "proj_123")
	if err == nil || !strings.Contains(err.Error(), "create-key --project proj_123") {
		t.Errorf("creating an existing project = %v; want an error pointing at create-key", err)
	}

	out, _, err = runCLI(t, "admin", "create-key", "--data-dir", dir, "--project", "proj_123")
	if err != nil {
		t.Fatalf("create-key: %v", err)
	}
	var second string
	for _, f := range strings.Fields(out) {
		if strings.HasPrefix(f, "lz_") {
			second = f
		}
	}
	if p, err := v.Verify(ctx, second); err != nil || p != "proj_123" || second == got.APIKey {
		t.Errorf("create-key printed %q; its key verifies as %q, %v; want a new proj_123 key", out, p, err)
	}

	if _, _, err := runCLI(t, "admin", "create-key", "--data-dir", dir, "--project", "nope"); err == nil || !strings.Contains(err.Error(), "create-project --id nope") {
		t.Errorf("create-key for a missing project = %v; want an error pointing at create-project", err)
	}
}

func TestAdminBadUsage(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"admin", "create-project", "--data-dir", dir, "--id", "Bad ID"},
		{"admin", "create-project", "--data-dir", dir},
		{"admin", "create-project", "--data-dir", dir, "--id", strings.Repeat("a", 65)},
		{"admin", "create-project", "--data-dir", dir, "--id", "x", "extra"},
		{"admin", "create-project", "--data-dir", dir, "--id", "_lizard"},
		{"admin", "create-key", "--data-dir", dir, "--project", "_lizard"},
		{"admin", "frobnicate"},
	} {
		if _, _, err := runCLI(t, args...); err == nil || cli.ExitCode(err) != 2 {
			t.Errorf("%q = %v (exit %d); want a usage error (exit 2)", args, err, cli.ExitCode(err))
		}
	}
	if out, _, err := runCLI(t, "admin"); err != nil || !strings.Contains(out, "create-project") {
		t.Errorf("lizard admin = %q, %v; want the usage", out, err)
	}
}
func TestServeConfig(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Listen != "127.0.0.1:8080" || c.DataDir != "data" || c.AddressPool != "169.254.128.0/17" || c.DefaultTimeout.Milliseconds() != 300000 {
		t.Errorf("defaults = %+v", c)
	}
	for _, args := range [][]string{
		{"--address-pool", "169.254.169.0/24"},
		{"--address-pool", "10.0.0.1/24"},
		{"--default-timeout", "0s"},
		{"--default-timeout", "48h"},
		{"--listen", "8080"},
		{"--log-level", "loud"},
		{"--preload", "numpy;rm -rf /"},
		{"--preload", "numpy,9lives"},
		{"--preload", "pandas..core"},
		{"--share-heap", "--runtime", "qemu"},
		{"--share-heap", "--template-snapshot=false"},
	} {
		c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, args)
		if err == nil {
			err = c.validate()
		}
		if err == nil || cli.ExitCode(err) != 2 {
			t.Errorf("serve %q: %v; want a usage error", args, err)
		}
		if args[0] == "--preload" && (err == nil || !strings.Contains(err.Error(), "--preload")) {
			t.Errorf("serve %q: %v; want the error to name --preload", args, err)
		}
	}
}

// TestPreloads: --preload's default is the warm package's, "" is an empty
// list (not nil, which would mean the default), and names are trimmed.
func TestPreloads(t *testing.T) {
	var errb bytes.Buffer
	c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := preloads(c.Preload); !slices.Equal(got, warm.DefaultPreload) {
		t.Errorf("default --preload = %q, want %q", got, warm.DefaultPreload)
	}
	for in, want := range map[string][]string{"": {}, " numpy , matplotlib.pyplot,": {"numpy", "matplotlib.pyplot"}} {
		if got := preloads(in); got == nil || !slices.Equal(got, want) {
			t.Errorf("preloads(%q) = %#v, want %#v", in, got, want)
		}
	}
}

// TestNetworkFlags: --network-default and --network-bound parse as
// policies; a bad one, or a default looser than the bound, is a usage
// error naming the flag; the bound's deny rules join the default.
func TestNetworkFlags(t *testing.T) {
	var errb bytes.Buffer
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--network-default", `{"default":"deny","allow":["a.*.com"]}`}, "--network-default.allow[0]"},
		{[]string{"--network-default", `{"defualt":"deny"}`}, "--network-default"},
		{[]string{"--network-bound", `not json`}, "--network-bound"},
		{[]string{"--network-bound", `{"default":"deny","allow":["pypi.org"]}`, "--network-default", `{"default":"deny","allow":["github.com"]}`}, "--network-default.allow[0]"},
		{[]string{"--egress-test-hosts", "a.test=not-an-ip"}, "--egress-test-hosts"},
	} {
		c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, tc.args)
		if err == nil {
			err = c.validate()
		}
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve %q: %v; want a usage error naming %s", tc.args, err, tc.want)
		}
	}
	c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, []string{"--network-bound", `{"deny":["*.evil.test"]}`,
		"--network-default", `{"default":"deny","allow":["pypi.org"]}`, "--egress-test-hosts", "a.test=203.0.113.7"})
	if err == nil {
		err = c.policy.validateNetwork() // the rest of validate wants runsc beside the binary
	}
	if err != nil {
		t.Fatal(err)
	}
	if d := c.policy.netDefault; d == nil || d.AllowName("x.evil.test") || !d.AllowName("pypi.org") || len(c.policy.testHosts["a.test"]) != 1 {
		t.Errorf("default policy %+v, test hosts %v; want pypi.org allowed, the bound's *.evil.test denied, a.test recorded", d, c.policy.testHosts)
	}
}

// TestAdminBackupRestoreFlags: backup and restore say what they need, and
// a backup of a directory with no store names the flag.
func TestAdminBackupRestoreFlags(t *testing.T) {
	if _, _, err := runCLI(t, "admin", "backup", "--data-dir", t.TempDir()); cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--to DIR") {
		t.Errorf("backup without --to: %v, want a usage error naming --to", err)
	}
	if _, _, err := runCLI(t, "admin", "restore"); cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--from DIR") {
		t.Errorf("restore without --from: %v, want a usage error naming --from", err)
	}
	_, _, err := runCLI(t, "admin", "backup", "--data-dir", t.TempDir(), "--to", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "no store in") {
		t.Errorf("backup of an empty directory: %v, want it refused", err)
	}
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	to := filepath.Join(t.TempDir(), "b")
	out, _, err := runCLI(t, "admin", "backup", "--data-dir", dir, "--to", to)
	if err != nil || !strings.Contains(out, "Backed up") {
		t.Fatalf("backup: %q, %v", out, err)
	}
	out, _, err = runCLI(t, "admin", "restore", "--from", to, "--data-dir", filepath.Join(t.TempDir(), "new"), "--cache-dir", t.TempDir())
	if err != nil || !strings.Contains(out, "Restored the backup of") {
		t.Fatalf("restore: %q, %v", out, err)
	}
}

// TestAdminCheck: check lists an image no row names and exits non-zero,
// --repair is refused while a server holds the data directory and removes
// it otherwise, and a clean directory has nothing left over.
func TestAdminCheck(t *testing.T) {
	dir := t.TempDir()
	st, err := store.Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	orphan := filepath.Join(dir, "images", "orphan")
	if err := os.MkdirAll(orphan, 0o700); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	out, _, err := runCLI(t, "admin", "check", "--data-dir", dir, "--cache-dir", cache)
	if cli.ExitCode(err) != 1 || !strings.Contains(out, "image without row") || !strings.Contains(out, orphan) {
		t.Fatalf("check: %q, %v; want the orphan image listed and exit 1", out, err)
	}
	release, err := lockDataDir(dir) // a server on it
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCLI(t, "admin", "check", "--data-dir", dir, "--cache-dir", cache, "--repair"); err == nil || !strings.Contains(err.Error(), "server stopped") {
		t.Errorf("check --repair beside a server: %v, want it refused", err)
	}
	release()
	if out, _, err := runCLI(t, "admin", "check", "--data-dir", dir, "--cache-dir", cache, "--repair"); err != nil || !strings.Contains(out, "Repaired") {
		t.Fatalf("check --repair: %q, %v", out, err)
	}
	if _, err := os.Stat(orphan); err == nil {
		t.Error("the orphan image is still there")
	}
	if out, _, err := runCLI(t, "admin", "check", "--data-dir", dir, "--cache-dir", cache); err != nil || !strings.Contains(out, "nothing left over") {
		t.Errorf("check after repair: %q, %v", out, err)
	}
}
