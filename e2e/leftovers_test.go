package e2e

// What a server and its sandboxes may leave on the host, for the soak and
// chaos suites: runsc processes, network namespaces, veths, nftables
// tables, cgroups, addresses of the server's pool, and directories under
// its data directory. Every check is bounded to one server: its data
// directory, its address pool and the sandbox IDs it ever had (its
// database keeps every row, ended ones included), so servers of other
// tests and other engineers on the machine never count.

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/netns"
	"github.com/lizard-build/lizard/internal/store"

	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"
)

// dbSandbox is one row of the server's sandboxes table.
type dbSandbox struct {
	ID, ProjectID, State, Role, EndReason string
}

// dbSandboxes reads every sandbox row the server's database holds, ended
// ones included, read-only: the server may be running.
func (s *server) dbSandboxes(t *testing.T) map[string]dbSandbox {
	t.Helper()
	driver, dsn := "sqlite", "file:"+filepath.Join(s.dataDir, store.FileName)+"?mode=ro&_pragma=busy_timeout(10000)"
	q, args := `SELECT id, project_id, state, role, end_reason FROM sandboxes`, []any{}
	if s.dbURL != "" {
		// A cluster's node: its rows in the shared database.
		driver, dsn = "pgx", s.dbURL
		q, args = q+` WHERE node = $1`, append(args, s.name)
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("opening the server's database: %v", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(context.Background(), q, args...)
	if err != nil {
		t.Fatalf("reading the server's sandboxes: %v", err)
	}
	defer rows.Close()
	out := map[string]dbSandbox{}
	for rows.Next() {
		var r dbSandbox
		if err := rows.Scan(&r.ID, &r.ProjectID, &r.State, &r.Role, &r.EndReason); err != nil {
			t.Fatalf("reading the server's sandboxes: %v", err)
		}
		out[r.ID] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading the server's sandboxes: %v", err)
	}
	return out
}

// runtimeIDs lists the sandbox directories the server's runtime holds.
func (s *server) runtimeIDs() []string {
	ents, _ := os.ReadDir(filepath.Join(s.dataDir, "gvisor", "sandboxes"))
	var ids []string
	for _, e := range ents {
		ids = append(ids, e.Name())
	}
	return ids
}

// hostProc is one process of the host with its command line.
type hostProc struct {
	pid  int
	args []string
}

func (p hostProc) String() string { return fmt.Sprintf("pid %d: %s", p.pid, strings.Join(p.args, " ")) }

// hostProcs lists the live (not zombie) processes whose command line
// contains any of parts.
func hostProcs(parts ...string) []hostProc {
	paths, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []hostProc
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			continue
		}
		hit := false
		for _, part := range parts {
			hit = hit || bytes.Contains(b, []byte(part))
		}
		if !hit {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil || !alive(pid) {
			continue
		}
		out = append(out, hostProc{pid: pid, args: strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")})
	}
	return out
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && i+2 < len(b) && b[i+2] != 'Z' && b[i+2] != 'X'
}

// leftoverCheck says what to look for.
type leftoverCheck struct {
	// ids are sandboxes that must have nothing left: no processes, network
	// namespace, veth, nftables table or cgroup named after them.
	ids []string
	// stopped means the server is not running: then nothing of it may be
	// left at all — no process naming its data directory, no sandbox or
	// runsc state in it, no address of its pool on the host — and ids
	// are all the sandboxes its database ever had.
	stopped bool
}

// leftovers lists what is left on the host against c. Images of paused
// sandboxes and snapshots are never expected: the suites end or delete
// them all before they look.
func (s *server) leftovers(t *testing.T, c leftoverCheck) []string {
	t.Helper()
	var left []string
	ids := slices.Clone(c.ids)
	if c.stopped {
		for id := range s.dbSandboxes(t) {
			ids = append(ids, id)
		}
		ids = append(ids, s.runtimeIDs()...)
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)

	// Processes: one scan for every ID (and the data directory).
	parts := slices.Clone(ids)
	if c.stopped {
		parts = append(parts, s.dataDir)
	}
	if len(parts) > 0 {
		for _, p := range hostProcs(parts...) {
			if p.pid == os.Getpid() {
				continue
			}
			left = append(left, "process "+p.String())
		}
	}

	ifaces := map[string]bool{}
	if list, err := net.Interfaces(); err == nil {
		for _, i := range list {
			ifaces[i.Name] = true
		}
	} else {
		t.Errorf("listing interfaces: %v", err)
	}
	tables := nftTables(t)
	for _, id := range ids {
		if _, err := os.Lstat(netns.Path(id)); err == nil {
			left = append(left, "network namespace "+netns.Name(id))
		}
		if ifaces[netns.VethName(id)] {
			left = append(left, "veth "+netns.VethName(id)+" of "+id)
		}
		if tables[netns.TableName(id)] {
			left = append(left, "nftables table inet "+netns.TableName(id))
		}
		cgs, _ := filepath.Glob("/sys/fs/cgroup/*/lizard/" + id)
		if d := "/sys/fs/cgroup/lizard/" + id; isDir(d) {
			cgs = append(cgs, d)
		}
		for _, cg := range cgs {
			left = append(left, "cgroup "+cg)
		}
	}

	dirs := []string{filepath.Join(s.dataDir, "images"), filepath.Join(s.dataDir, "snapshots")}
	if c.stopped {
		dirs = append(dirs, filepath.Join(s.dataDir, "gvisor", "sandboxes"), filepath.Join(s.dataDir, "gvisor", "state"))
	}
	for _, d := range dirs {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			left = append(left, "data directory entry "+filepath.Join(d, e.Name()))
		}
	}

	if c.stopped {
		// Spare networks (netns.Prepare) are named after the server's
		// pid: a stop drains them, the next start sweeps a crash's.
		for _, pid := range s.pids {
			p36 := strconv.FormatInt(int64(pid), 36)
			m, _ := filepath.Glob(filepath.Join(netns.Dir, netns.Prefix+"spare."+p36+".*"))
			for _, ns := range m {
				left = append(left, "spare network namespace "+filepath.Base(ns))
			}
			for name := range ifaces {
				if strings.HasPrefix(name, "lzs"+p36+".") {
					left = append(left, "spare veth "+name)
				}
			}
		}
		pool := fmt.Sprintf("169.254.%d.", s.pool)
		for _, cmd := range [][]string{{"ip", "-o", "-4", "addr", "show"}, {"ip", "-4", "route", "show"}} {
			out, err := exec.Command(cmd[0], cmd[1:]...).Output()
			if err != nil {
				t.Errorf("%s: %v", strings.Join(cmd, " "), err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, pool) {
					left = append(left, "address of the server's pool: "+strings.Join(strings.Fields(line), " "))
				}
			}
		}
	}
	return left
}

// nftTables returns the names of the host's nftables tables.
func nftTables(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("nft", "list", "tables").Output()
	if err != nil {
		t.Errorf("nft list tables: %v", err)
	}
	tables := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "table" {
			tables[f[2]] = true
		}
	}
	return tables
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// expectNoLeftovers waits up to 30 s for the host to hold nothing c looks
// for (removal after a kill or a crash may take a moment), then fails
// listing what is left.
func (s *server) expectNoLeftovers(t *testing.T, c leftoverCheck) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := s.leftovers(t, c)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%d things left behind:\n  %s", len(left), strings.Join(left, "\n  "))
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// stopAndExpectNothingLeft stops the server gracefully and checks that
// nothing of it or of any sandbox it ever had is left on the host.
// What is left is listed with the tail of the server's log, which says
// what its stop did.
func (s *server) stopAndExpectNothingLeft(t *testing.T) {
	t.Helper()
	failed := t.Failed()
	s.stop()
	s.expectNoLeftovers(t, leftoverCheck{stopped: true})
	if !failed && t.Failed() {
		t.Logf("the stopped server's log tail:\n%s", tail(s.logs(), 30))
	}
}

// serverRSS is the resident memory of the running server, in bytes.
func (s *server) serverRSS(t *testing.T) int64 {
	t.Helper()
	return rss(t, s.cmd.Process.Pid)
}

// kill9 ends the server with SIGKILL, as a crash would, and waits for it.
// Its sandboxes are left as a crash leaves them, and its spare networks
// until the next start sweeps them.
func (s *server) kill9() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.pids = slices.DeleteFunc(s.pids, func(p int) bool { return p == s.cmd.Process.Pid })
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}
