package hostproc

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

func TestFindStartAlive(t *testing.T) {
	// A marker no other process has: this test's pid and the time.
	marker := fmt.Sprintf("hostproc-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	// sh stays (the trailing ':' keeps it from exec'ing sleep) with the
	// marker as its $0; its group is killed at the end.
	cmd := exec.Command("/bin/sh", "-c", "sleep 30; :", marker)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	// Until the child has exec'd, its command line is still this test's.
	var got []int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if got = Find(func(args []string) bool { return slices.Contains(args, marker) }); len(got) > 0 {
			break
		}
	}
	// A child sh forked has its command line too until it exec's sleep.
	if !slices.Contains(got, pid) {
		t.Errorf("Find = %v, want it to hold %d", got, pid)
	}
	if Start(pid) == "" || !Alive(pid) {
		t.Errorf("Start(%d) = %q, Alive = %v; want a start time and alive", pid, Start(pid), Alive(pid))
	}
	if slices.Contains(Find(func([]string) bool { return true }), os.Getpid()) {
		t.Error("Find returned this process")
	}
	syscall.Kill(-pid, syscall.SIGKILL)
	cmd.Wait()
	if Alive(pid) {
		t.Errorf("Alive(%d) after its end", pid)
	}
}
