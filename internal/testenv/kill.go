package testenv

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// KillDead kills pid with SIGKILL and returns once it is dead, every thread
// (its pipes closed), whether or not its parent has reaped it yet: a test of
// what a caller sees of a kernel that died must not race its last threads.
func KillDead(t testing.TB, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("killing %d: %v", pid, err)
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		// A zombie leader's other threads may still hold its files.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") && len(tasks) <= 1 {
			return
		}
	}
	t.Fatalf("%d still alive 5 s after SIGKILL", pid)
}
