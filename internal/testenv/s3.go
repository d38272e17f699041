package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/deathsig"
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
	wait     func() error // the versitygw's, from deathsig.Start
	t        testing.TB
}

// S3Server starts an S3 server with one empty bucket and stops it, and
// removes its directory, when t ends.
func S3Server(t testing.TB) *S3 {
	t.Helper()
	s, err := StartS3()
	if s == nil && err == nil {
		missing(t, "no versitygw (run `make versitygw`, which builds it into .cache/bin)")
	}
	if s != nil {
		t.Cleanup(s.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.t = t
	return s
}

// StartS3 is S3Server for programs (the bench): nil and no error when
// versitygw is not built; Close stops it and removes its directory.
func StartS3() (*S3, error) {
	bin := findCacheBin("versitygw", "LIZARD_VERSITYGW")
	if bin == "" {
		return nil, nil
	}
	dir, err := os.MkdirTemp("", "lizard-s3-")
	if err != nil {
		return nil, err
	}
	s := &S3{Access: "lizardtest", Secret: "lizardtestsecret", Bucket: "images", bin: bin, dir: dir}
	if err := os.Mkdir(filepath.Join(dir, s.Bucket), 0o700); err != nil {
		return s, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return s, err
	}
	s.addr = ln.Addr().String()
	ln.Close()
	s.Endpoint = "http://" + s.addr
	return s, s.start()
}

// Close stops the server and removes its directory.
func (s *S3) Close() {
	s.Stop()
	os.RemoveAll(s.dir)
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

// Start starts the server again after Stop, on the same address and
// directory, and waits until it accepts connections.
func (s *S3) Start() {
	if err := s.start(); err != nil {
		s.t.Helper()
		s.t.Fatal(err)
	}
}

func (s *S3) start() error {
	s.cmd = exec.Command(s.bin, "--access", s.Access, "--secret", s.Secret, "--port", s.addr, "posix", s.dir)
	wait, err := deathsig.Start(s.cmd) // dies with the test binary
	if err != nil {
		return fmt.Errorf("starting versitygw: %w", err)
	}
	s.wait = wait
	deadline := time.Now().Add(60 * time.Second) // a loaded machine starts it slowly
	for {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw did not listen on %s: %w", s.addr, err)
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
	s.wait()
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
