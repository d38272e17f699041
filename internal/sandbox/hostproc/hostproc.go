// Package hostproc reads what backends need to know about their host
// processes from /proc: whether one lives, when it started (to tell it
// from a later process given the same pid), and which ones a sandbox has
// (found by their command lines, which name the sandbox's directory).
package hostproc

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Alive reports whether pid exists and is not a zombie (a zombie holds
// nothing; its parent, a server that was restarted or runsc itself, reaps
// it).
func Alive(pid int) bool { return Start(pid) != "" }

// Start is the start time of live process pid (field 22 of its /proc
// stat), or "" if there is no such process or it has exited.
func Start(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The state follows the command name, which is in parentheses and
	// may hold anything.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3, the state; field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return ""
	}
	return f[19]
}

// Find returns the live processes but this one whose arguments match.
func Find(match func(args []string) bool) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(b) == 0 {
			continue
		}
		if match(strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")) && Alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
