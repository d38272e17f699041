package testenv

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// S3 is an S3-compatible server for tests: versitygw over a directory, on
// loopback (`make versitygw` builds it into .cache/bin).
type S3 struct {
	Endpoint string // http://127.0.0.1:PORT
	Access   string
	Secret   string
	Bucket   string // made empty at start
	bin      string
	dir      string
	addr     string
	cmd      *exec.Cmd
	t        testing.TB
}

// S3Server starts an S3 server with one empty bucket and stops it, and
// removes its directory, when t ends.
func S3Server(t testing.TB) *S3 {
	t.Helper()
	bin := findCacheBin("versitygw", "LIZARD_VERSITYGW")
	if bin == "" {
		missing(t, "no versitygw (run `make versitygw`, which builds it into .cache/bin)")
	}
	dir, err := os.MkdirTemp("", "lizard-s3-")
	if err != nil {
		t.Fatal(err)
	}
	s := &S3{Access: "lizardtest", Secret: "lizardtestsecret", Bucket: "images", bin: bin, dir: dir, t: t}
	t.Cleanup(func() {
		s.Stop()
		os.RemoveAll(dir)
	})
	if err := os.Mkdir(filepath.Join(dir, s.Bucket), 0o700); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = ln.Addr().String()
	ln.Close()
	s.Endpoint = "http://" + s.addr
	s.Start()
	return s
}

// Env is the environment an image store client needs to reach s.
func (s *S3) Env() []string {
	return []string{"AWS_ENDPOINT_URL=" + s.Endpoint, "AWS_ACCESS_KEY_ID=" + s.Access,
		"AWS_SECRET_ACCESS_KEY=" + s.Secret, "AWS_REGION=us-east-1"}
}

// Getenv looks name up in Env.
func (s *S3) Getenv(name string) string {
	for _, kv := range s.Env() {
		if k, v, _ := strings.Cut(kv, "="); k == name {
			return v
		}
	}
	return ""
}

// Start starts the server (again, after Stop) on the same address and
// directory, and waits until it accepts connections.
func (s *S3) Start() {
	s.t.Helper()
	s.cmd = exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret, "--port", s.addr, "posix", s.dir)
	s.cmd.Stdout, s.cmd.Stderr = nil, nil
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("starting versitygw: %v", err)
	}
	deadline := time.Now().Add(60 * time.Second) // a loaded machine starts it slowly
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw did not listen on %s: %v", s.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop stops the server, keeping its data.
func (s *S3) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Dir is the directory the server keeps its buckets in (one directory per
// bucket, one file per object): tests corrupt objects there.
func (s *S3) Dir() string { return s.dir }

// findCacheBin finds a tool `make` builds into the repository's
// .cache/bin: $env, or .cache/bin/name in this or a parent directory.
func findCacheBin(name, env string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	wd, err := os.Getwd()
	if err != nil {
		return ""
	}
	for d := wd; ; d = filepath.Dir(d) {
		p := filepath.Join(d, ".cache", "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == filepath.Dir(d) {
			return ""
		}
	}
}
