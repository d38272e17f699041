package agent

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestInterpreterHealth: the interpreter's /health for code inside the
// sandbox answers GET /health alone, 200 "OK" as E2B's, from loopback
// (which the agent's own API refuses once it has its secret), and no other
// path or method (404): it is no way to the agent's handlers. Run serves it on
// its own listener and stops it with the agent.
func TestInterpreterHealth(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ta := newTestAgent(t, func(c *Config) {
		c.Listen = "127.0.0.1:0"
		c.HealthListen = addr
		c.Secret = "s3cret"
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ta.Agent.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	get := func(method, path string) (int, string) {
		t.Helper()
		var resp *http.Response
		deadline := time.Now().Add(5 * time.Second)
		for {
			req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(""))
			resp, err = http.DefaultClient.Do(req)
			if err == nil || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := get("GET", "/health"); status != http.StatusOK || strings.TrimSpace(body) != `"OK"` {
		t.Errorf("GET /health = %d %q, want 200 \"OK\"", status, body)
	}
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{"POST", "/health", http.StatusNotFound},
		{"POST", "/execute", http.StatusNotFound},
		{"GET", "/contexts", http.StatusNotFound},
		{"GET", "/files?path=/etc/passwd", http.StatusNotFound},
		{"PUT", "/files?path=/etc/passwd", http.StatusNotFound},
		{"POST", "/reseed", http.StatusNotFound},
	} {
		if status, body := get(tc.method, tc.path); status != tc.status {
			t.Errorf("%s %s = %d %q, want %d", tc.method, tc.path, status, body, tc.status)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Logf("Run: %v", err)
	}
	done <- nil
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			break
		}
		c.Close()
		if time.Now().After(deadline) {
			t.Fatalf("the health listener outlived the agent")
		}
	}
}
