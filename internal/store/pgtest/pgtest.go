// Package pgtest starts a throwaway PostgreSQL for tests: Debian's server
// binaries (/usr/lib/postgresql/*/bin), initdb into a temporary directory,
// listening on 127.0.0.1 only on a free port, with a fresh database per
// test. It is stopped with pg_ctl (only the server it started) and its
// directory removed at the end.
//
// As root the server runs as the postgres user (PostgreSQL refuses to run
// as root) with su; as any other user it runs as that user.
//
// Without PostgreSQL installed the tests that need it are skipped, or
// fail under LIZARD_TEST_STRICT=1 (`make test` installs it: make deps).
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// Server is one PostgreSQL server started for tests.
type Server struct {
	bin      string // the directory holding initdb, pg_ctl, postgres
	dir      string // temporary: data/, the log, the socket
	port     int
	password string
	uid, gid int // the server's user; -1 when it is the current user

	watchdog *exec.Cmd // stops the server if this process dies without Stop

	mu sync.Mutex
	n  int // databases made
}

// Bin finds the newest installed PostgreSQL's server binaries.
func Bin() (string, error) {
	found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(found) == 0 {
		if p, err := exec.LookPath("initdb"); err == nil {
			return filepath.Dir(p), nil
		}
		return "", errors.New("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb): apt-get install postgresql, or make deps")
	}
	sort.Slice(found, func(i, j int) bool { return version(found[i]) > version(found[j]) })
	return filepath.Dir(found[0]), nil
}

func version(initdb string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(initdb))))
	return v
}

// Start initialises and starts a server. Stop it with Stop.
func Start() (*Server, error) {
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, uid: -1, gid: -1}
	pw := make([]byte, 16)
	rand.Read(pw)
	s.password = hex.EncodeToString(pw)
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running PostgreSQL as root needs the postgres user (the postgresql package makes it): %w", err)
		}
		s.uid, _ = strconv.Atoi(u.Uid)
		s.gid, _ = strconv.Atoi(u.Gid)
	}
	if s.dir, err = os.MkdirTemp("", "lizard-pg-"); err != nil {
		return nil, err
	}
	if s.uid >= 0 {
		if err := os.Chown(s.dir, s.uid, s.gid); err != nil {
			os.RemoveAll(s.dir)
			return nil, err
		}
	}
	pwfile := filepath.Join(s.dir, "pw")
	if err := os.WriteFile(pwfile, []byte(s.password+"\n"), 0o600); err == nil && s.uid >= 0 {
		err = os.Chown(pwfile, s.uid, s.gid)
	}
	if err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if out, err := s.run(filepath.Join(bin, "initdb"), "-D", s.data(), "-U", "postgres", "-E", "UTF8", "--locale=C",
		"--auth-local=trust", "--auth-host=scram-sha-256", "--pwfile="+pwfile, "--no-sync"); err != nil {
		os.RemoveAll(s.dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	os.Remove(pwfile)
	if s.port, err = freePort(); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	if err := s.StartServer(); err != nil {
		os.RemoveAll(s.dir)
		return nil, err
	}
	s.startWatchdog()
	return s, nil
}

// startWatchdog starts a shell that, should this process die without
// Stop (a test binary killed by -timeout), stops the server and removes its
// directory. Stop ends the watchdog first, by its pid.
func (s *Server) startWatchdog() {
	stop := s.command(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-m", "immediate", "-w", "stop")
	script := fmt.Sprintf("while kill -0 %d 2>/dev/null; do sleep 2; done; %s >/dev/null 2>&1; rm -rf '%s'",
		os.Getpid(), strings.Join(stop, " "), s.dir)
	cmd := exec.Command("/bin/sh", "-c", script)
	// Its own process group: a signal to the test's group does not end it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err == nil {
		s.watchdog = cmd
	}
}

// command is the argv that runs a PostgreSQL binary as the server's user,
// shell-quoted.
func (s *Server) command(name string, args ...string) []string {
	q := make([]string, 0, len(args)+1)
	for _, a := range append([]string{name}, args...) {
		q = append(q, "'"+strings.ReplaceAll(a, "'", `'\''`)+"'")
	}
	if s.uid < 0 {
		return q
	}
	inner := strings.Join(q, " ")
	return []string{"su", "postgres", "-s", "/bin/sh", "-c", "'" + strings.ReplaceAll(inner, "'", `'\''`) + "'"}
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

// run runs a PostgreSQL binary as the server's user.
func (s *Server) run(name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", strings.Join(s.command(name, args...), " "))
	cmd.Dir = s.dir
	return cmd.CombinedOutput()
}

// StartServer starts the server (again) on its port, waiting until it
// takes connections.
func (s *Server) StartServer() error {
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off -c max_connections=200", s.port, s.dir)
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-l", filepath.Join(s.dir, "log"),
		"-w", "-t", "60", "-o", opts, "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(s.dir, "log"))
		return fmt.Errorf("pg_ctl start: %w: %s\n%s", err, out, log)
	}
	return nil
}

// StopServer stops the server (fast shutdown: sessions are cut), keeping
// its data for StartServer.
func (s *Server) StopServer() error {
	if out, err := s.run(filepath.Join(s.bin, "pg_ctl"), "-D", s.data(), "-m", "fast", "-w", "-t", "60", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, out)
	}
	return nil
}

// Stop stops the server and removes its directory.
func (s *Server) Stop() error {
	if s.watchdog != nil {
		s.watchdog.Process.Kill()
		s.watchdog.Wait()
	}
	var err error
	if _, statErr := os.Stat(filepath.Join(s.data(), "postmaster.pid")); statErr == nil {
		err = s.StopServer()
	}
	if rmErr := os.RemoveAll(s.dir); err == nil {
		err = rmErr
	}
	return err
}

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// URL is the postgres:// URL of database db as the superuser.
func (s *Server) URL(db string) string {
	u := url.URL{Scheme: "postgres", User: url.UserPassword("postgres", s.password),
		Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/" + db, RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase makes a new empty database and returns its name.
func (s *Server) CreateDatabase(ctx context.Context) (string, error) {
	s.mu.Lock()
	s.n++
	name := fmt.Sprintf("lizard_test_%d", s.n)
	s.mu.Unlock()
	db, err := sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer db.Close()
	// FILE_COPY (PostgreSQL 15+) copies the template's files instead of
	// writing them through the WAL: several times faster for a test.
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name+" STRATEGY = FILE_COPY"); err != nil {
		if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
			return "", fmt.Errorf("creating database %s: %w", name, err)
		}
	}
	return name, nil
}

// DropDatabase drops database name, ending its sessions.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	db, err := sql.Open("pgx", s.URL("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	_, err = db.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	return err
}

// NewDatabase makes a database for test t, dropped when it ends, and
// returns its URL.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name, err := s.CreateDatabase(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.DropDatabase(ctx, name); err != nil {
			t.Errorf("dropping test database: %v", err)
		}
	})
	return s.URL(name)
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the test binary's server, starting it on first use. Without
// PostgreSQL t is skipped, or fails under LIZARD_TEST_STRICT=1. Call
// StopShared from TestMain after m.Run.
func Shared(t testing.TB) *Server {
	t.Helper()
	shared.once.Do(func() { shared.srv, shared.err = Start() })
	if shared.err != nil {
		if os.Getenv("LIZARD_TEST_STRICT") == "1" {
			t.Fatalf("PostgreSQL: %v", shared.err)
		}
		t.Skipf("PostgreSQL: %v (LIZARD_TEST_STRICT=1 makes this a failure)", shared.err)
	}
	return shared.srv
}

// StopShared stops the shared server if one was started.
func StopShared() error {
	if shared.srv == nil {
		return nil
	}
	return shared.srv.Stop()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
