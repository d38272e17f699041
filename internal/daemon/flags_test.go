package daemon

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/cli"
	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
	"github.com/lizard-build/lizard/internal/testenv"
)

// TestSharedFlagsEveryRole: every shared flag parses to the same value on
// `lizard serve`, `lizard api` and `lizard node`, and is refused (or not)
// with the same message, so a flag means one thing on one machine and in a
// cluster. A flag added to sharedFlags without a row here fails.
func TestSharedFlagsEveryRole(t *testing.T) {
	testenv.RequiresRoot(t) // the policy's check asks nftables over netlink
	e := cli.Env{Stdout: io.Discard, Stderr: io.Discard}
	roles := []struct {
		name  string
		parse func(args []string) (*sharedFlags, error)
	}{
		{roleServe, func(a []string) (*sharedFlags, error) {
			c, err := parseServe(e, a)
			if err != nil {
				return nil, err
			}
			return &c.sharedFlags, nil
		}},
		{roleAPI, func(a []string) (*sharedFlags, error) {
			c, err := parseAPI(e, a)
			if err != nil {
				return nil, err
			}
			return &c.sharedFlags, nil
		}},
		{roleNode, func(a []string) (*sharedFlags, error) {
			c, err := parseNode(e, a)
			if err != nil {
				return nil, err
			}
			return &c.sharedFlags, nil
		}},
	}
	tests := []struct {
		flag, value string
		bad         bool // validate refuses it
	}{
		{"listen", "0.0.0.0:9000", false},
		{"listen", "9000", true},
		{"metrics-listen", "", false},
		{"log-level", "debug", false},
		{"log-level", "loud", true},
		{"default-timeout", "10m", false},
		{"default-timeout", "0s", true},
		{"max-timeout", "48h", false},
		{"max-timeout", "1m", true},
		{"max-child-timeout", "30m", false},
		{"ports-domain", "sandboxes.example.com", false},
		{"ports-domain", "*.example.com", true},
		{"ports-resume", "true", false},
		{"max-volume-mb", "2048", false},
		{"max-volume-mb", "8", true},
		{"template-builds-per-hour", "5", false},
		{"template-builds-per-hour", "-1", true},
		{"registry-config", "/root/.docker/config.json", false},
		{"registry-allow", "ghcr.io,registry.example.com:5000", false},
		{"secrets-key-file", "/etc/lizard/secrets.key", false},
		{"egress", "none", false},
		{"egress", "sideways", true},
		{"egress-allow", "203.0.113.0/24", false},
		{"egress-allow", "example.com", true},
		{"memory-mb", "512", false},
		{"memory-mb", "32", true},
		{"max-memory-mb", "8192", false},
		{"cpus", "2", false},
		{"max-cpus", "8", false},
		{"max-cpus", "0.5", true},
		{"disk-mb", "4096", false},
		{"max-disk-mb", "20480", false},
		{"max-file-mb", "5", false},
		{"max-file-mb", "0", true},
		{"processes", "256", false},
		{"open-files", "1024", false},
		{"open-files", "8", true},
		{"max-sandboxes-per-project", "10", false},
		{"max-descriptors-per-project", "1000", false},
		{"max-descriptors-per-project", "-1", true},
		{"max-volumes-per-project", "4", false},
		{"max-volume-total-mb", "1000", false},
		{"max-disk-per-project-mb", "100000", false},
		{"max-disk-per-project-mb", "1000", true}, // under --disk-mb
		{"max-templates-per-project", "3", false},
		{"max-templates-per-project", "-1", true},
		{"max-template-disk-per-project-mb", "4096", false},
		{"max-template-disk-per-project-mb", "-1", true},
		{"creates-per-second", "2", false},
		{"create-burst", "5", false},
		{"requests-per-second", "50", false},
		{"request-burst", "60", false},
		{"network-default", `{"default":"deny","allow":["pypi.org"]}`, false},
		{"network-default", `not json`, true},
		{"network-bound", `{"deny":["*.evil.test"]}`, false},
		{"egress-test-hosts", "a.test=203.0.113.7", false},
		{"egress-test-hosts", "a.test=not-an-ip", true},
		{"sandbox-api-port", "9000", false},
	}

	// Every flag sharedFlags registers has a row. --egress-extra-roots is
	// the node's alone (secretsFlags: roots of the egress it runs).
	all := flag.NewFlagSet("", flag.ContinueOnError)
	new(sharedFlags).register(all, roleServe)
	rows := map[string]bool{"egress-extra-roots": true}
	for _, tt := range tests {
		rows[tt.flag] = true
	}
	all.VisitAll(func(f *flag.Flag) {
		if !rows[f.Name] {
			t.Errorf("--%s is a shared flag with no row in TestSharedFlagsEveryRole", f.Name)
		}
	})

	for _, tt := range tests {
		// --listen given, as node's default port is its own.
		args := []string{"--listen=127.0.0.1:7000", "--" + tt.flag + "=" + tt.value}
		var first *sharedFlags
		var firstErr string
		for i, r := range roles {
			f, err := r.parse(args)
			if err != nil {
				t.Errorf("lizard %s %q: %v", r.name, args, err)
				continue
			}
			verr := fmt.Sprint(f.validate())
			if (verr != "<nil>") != tt.bad {
				t.Errorf("lizard %s --%s=%s: validate = %s, want refused %v", r.name, tt.flag, tt.value, verr, tt.bad)
			}
			if i == 0 {
				first, firstErr = f, verr
				continue
			}
			if first != nil && !reflect.DeepEqual(f, first) {
				t.Errorf("lizard %s --%s=%s parses to\n%+v\nlizard serve to\n%+v", r.name, tt.flag, tt.value, *f, *first)
			}
			if verr != firstErr {
				t.Errorf("lizard %s --%s=%s: validate = %s; lizard serve's %s", r.name, tt.flag, tt.value, verr, firstErr)
			}
		}
	}
}

// TestIdleReclaimFlag: --idle-reclaim is refused below 0 at parse time
// (either backend takes it), and at start on a runtime that cannot push
// memory to swap, or on a host that cannot (no swap: the runtime's
// CanReclaim, tested in the gvisor and qemu packages and end to end).
func TestIdleReclaimFlag(t *testing.T) {
	var errb bytes.Buffer
	for _, args := range [][]string{
		{"--idle-reclaim", "-1s"},
	} {
		c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, args)
		if err == nil {
			err = c.validate()
		}
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), "--idle-reclaim") {
			t.Errorf("serve %q: %v; want a usage error naming --idle-reclaim", args, err)
		}
	}
	c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, []string{"--idle-reclaim", "90s"})
	if err != nil || c.IdleReclaim != 90*time.Second {
		t.Errorf("--idle-reclaim 90s = %s, %v; want 1m30s", c.IdleReclaim, err)
	}
	c, err = parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, []string{"--idle-reclaim", "1m", "--runtime", "qemu"})
	if err == nil {
		err = c.validate()
	}
	if err != nil && strings.Contains(err.Error(), "idle-reclaim") {
		t.Errorf("serve --idle-reclaim 1m --runtime qemu: %v; want it taken (QEMU VMs are paged out)", err)
	}
	fake := sandboxtest.NewFake() // not a sandbox.Reclaimer
	if err := checkIdleReclaim(fake, 0); err != nil {
		t.Errorf("checkIdleReclaim without the flag: %v; want nil", err)
	}
	if err := checkIdleReclaim(fake, time.Minute); err == nil || !strings.Contains(err.Error(), "--idle-reclaim") {
		t.Errorf("checkIdleReclaim on a runtime that cannot: %v; want an error naming --idle-reclaim", err)
	}
}

// TestCheckShareHeap: --share-heap is off by default, and refused, saying
// why, with QEMU, off x86-64 and without template snapshots.
func TestCheckShareHeap(t *testing.T) {
	var errb strings.Builder
	if c, err := parseServe(cli.Env{Stdout: &errb, Stderr: &errb}, nil); err != nil || c.ShareHeap {
		t.Errorf("default --share-heap = %v, %v; want off", c.ShareHeap, err)
	}
	for _, tt := range []struct {
		rt       string
		snapshot bool
		arch     string
		want     string // in the usage error; "" none
	}{
		{"gvisor", true, "amd64", ""},
		{"qemu", true, "amd64", "--runtime gvisor only"},
		{"gvisor", true, "arm64", "x86-64 only"},
		{"gvisor", false, "amd64", "--template-snapshot=true"},
	} {
		err := checkShareHeap(true, tt.rt, tt.snapshot, tt.arch)
		if tt.want == "" {
			if err != nil {
				t.Errorf("--share-heap on %s %s: %v; want it taken", tt.rt, tt.arch, err)
			}
			continue
		}
		if err == nil || cli.ExitCode(err) != 2 || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("--share-heap on %s %s, snapshots %v: %v; want a usage error saying %q", tt.rt, tt.arch, tt.snapshot, err, tt.want)
		}
	}
	if err := checkShareHeap(false, "qemu", false, "arm64"); err != nil {
		t.Errorf("without --share-heap: %v", err)
	}
	// At start: a runtime that cannot share a heap is refused.
	fake := sandboxtest.NewFake()
	if err := checkShareHeapRuntime(context.Background(), fake, false); err != nil {
		t.Errorf("checkShareHeapRuntime without the flag: %v; want nil", err)
	}
	if err := checkShareHeapRuntime(context.Background(), fake, true); err == nil || !strings.Contains(err.Error(), "--share-heap") {
		t.Errorf("checkShareHeapRuntime on a runtime that cannot: %v; want an error naming --share-heap", err)
	}
}
