package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/filesystem/filesystemconnect"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process"
	"github.com/lizard-build/lizard/internal/e2b/envd/proto/process/processconnect"
)

// envdHeaders puts E2B's sandbox headers on every request, as the SDKs do
// with E2B_SANDBOX_URL set.
type envdHeaders struct {
	id, token string
}

func (h envdHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("E2b-Sandbox-Id", h.id)
	r.Header.Set("E2b-Sandbox-Port", "49983")
	r.Header.Set("X-Access-Token", h.token)
	return http.DefaultTransport.RoundTrip(r)
}

// TestClusterE2BEnvd: envd through a cluster — a sandbox created through
// one lizard api's E2B surface runs a command, takes a file and lists it
// through the other's, the calls reaching the node that runs it (the
// SDK's own tests, sdk/python/tests/e2e/test_e2b_envd.py, run on one
// machine).
func TestClusterE2BEnvd(t *testing.T) {
	c, _ := startCluster(t)
	ctx := context.Background()
	req, _ := http.NewRequest("POST", c.apis[0].url+"/e2b/sandboxes", strings.NewReader(`{"templateID":"base","timeout":300}`))
	req.Header.Set("X-API-Key", c.key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || json.Unmarshal(body, &sb) != nil || sb.EnvdAccessToken == "" {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, body)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest("DELETE", c.apis[0].url+"/e2b/sandboxes/"+sb.SandboxID, nil)
		req.Header.Set("X-API-Key", c.key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	hc := &http.Client{Transport: envdHeaders{sb.SandboxID, sb.EnvdAccessToken}}
	base := c.apis[1].url + "/e2b/sandbox"

	stream, err := processconnect.NewProcessClient(hc, base).Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "echo hi from the node"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	var stdout string
	var end *process.ProcessEvent_EndEvent
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		stdout += string(ev.GetData().GetStdout())
		if ev.GetEnd() != nil {
			end = ev.GetEnd()
		}
	}
	if stream.Err() != nil || stdout != "hi from the node\n" || end == nil || end.GetExitCode() != 0 {
		t.Fatalf("Start through the other api: %q, end %v, err %v", stdout, end, stream.Err())
	}

	up, _ := http.NewRequest("POST", base+"/files?path=/tmp/cluster/f.txt", bytes.NewReader([]byte("cluster")))
	up.Header.Set("Content-Type", "application/octet-stream")
	if resp, err := hc.Do(up); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("upload: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	list, err := filesystemconnect.NewFilesystemClient(hc, c.apis[0].url+"/e2b/sandbox").ListDir(ctx, connect.NewRequest(&filesystem.ListDirRequest{Path: "/tmp/cluster"}))
	if err != nil || len(list.Msg.GetEntries()) != 1 || list.Msg.GetEntries()[0].GetSize() != 7 {
		t.Fatalf("ListDir through the first api: %v, %v; want f.txt of 7 bytes", list, err)
	}
	get, _ := http.NewRequest("GET", base+"/files?path=/tmp/cluster/f.txt", nil)
	resp, err = hc.Do(get)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != "cluster" {
		t.Errorf("download: %d %q, want the uploaded bytes", resp.StatusCode, got)
	}

	// Paused through one api, the sandbox is not running through the
	// other's sandbox URL (E2B's proxy's 502, is_running() False) and
	// stays paused, until connect resumes it.
	control := func(api int, method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, c.apis[api].url+"/e2b"+path, nil)
		req.Header.Set("X-API-Key", c.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	health := func() (int, string) {
		t.Helper()
		resp, err := hc.Get(base + "/health")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := control(0, "POST", "/sandboxes/"+sb.SandboxID+"/pause"); code != http.StatusNoContent {
		t.Fatalf("pause: %d %s", code, b)
	}
	if code, b := health(); code != http.StatusBadGateway || !strings.Contains(b, "was not found: it is paused") {
		t.Errorf("health of the paused sandbox through the other api: %d %s; want 502, not found, paused", code, b)
	}
	if code, b := control(1, "GET", "/sandboxes/"+sb.SandboxID); !strings.Contains(b, `"state":"paused"`) {
		t.Errorf("after a call into it, the sandbox is %d %s; want still paused", code, b)
	}
	if code, b := control(1, "POST", "/v2/sandboxes/"+sb.SandboxID+"/connect"); code != http.StatusCreated {
		t.Fatalf("connect: %d %s; want 201 resumed", code, b)
	}
	if code, b := health(); code != http.StatusNoContent {
		t.Errorf("health after connect: %d %s; want 204", code, b)
	}

	// Killed through one api under a command followed through the other:
	// the stream's connection drops, as E2B's proxy drops it, and /health
	// then says the sandbox was not found (the SDKs' "killed or reached
	// its end of life").
	follow, err := processconnect.NewProcessClient(hc, base).Start(ctx, connect.NewRequest(&process.StartRequest{
		Process: &process.ProcessConfig{Cmd: "/bin/bash", Args: []string{"-l", "-c", "sleep 120"}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !follow.Receive() || follow.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("followed command: %v, %v; want its start", follow.Msg(), follow.Err())
	}
	if code, b := control(0, "DELETE", "/sandboxes/"+sb.SandboxID); code != http.StatusNoContent {
		t.Fatalf("kill: %d %s", code, b)
	}
	began := time.Now()
	for follow.Receive() {
	}
	took := time.Since(began)
	if err := follow.Err(); !errors.Is(err, syscall.ECONNRESET) || took > 3*time.Second {
		t.Errorf("followed command of the killed sandbox ended after %v with %v (code %v); want its connection dropped within 3 s", took, err, connect.CodeOf(err))
	}
	t.Logf("the followed command's connection dropped %v after the kill", took)
	if code, b := health(); code != http.StatusBadGateway || !strings.Contains(b, "sandbox "+sb.SandboxID+" was not found") {
		t.Errorf("health of the killed sandbox: %d %s; want 502, not found", code, b)
	}
}
