package gvisor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox/sandboxtest"
)

func TestChooseVictim(t *testing.T) {
	const mib = 1 << 20
	init := guestProcess{PID: 1, PGID: 1, UID: 0, Comm: "pid1", RSS: 900 * mib}
	tests := []struct {
		name      string
		procs     []guestProcess
		wantPGID  int32
		wantPID   int32
		wantProcs int
		wantNone  bool
	}{
		{
			name: "the user's largest group, not the bigger root agent",
			procs: []guestProcess{init,
				{PID: 2, PGID: 1, UID: 0, Comm: "agent", RSS: 500 * mib},
				{PID: 10, PGID: 10, UID: 1000, Comm: "python3", RSS: 200 * mib},
				{PID: 20, PGID: 20, UID: 1000, Comm: "python3", RSS: 90 * mib},
				{PID: 30, PGID: 30, UID: 0, Comm: "root-cmd", RSS: 400 * mib},
			},
			wantPGID: 10, wantProcs: 1,
		},
		{
			name: "a fork bomb's many small processes outweigh one large one",
			procs: append([]guestProcess{init,
				{PID: 10, PGID: 10, UID: 1000, Comm: "python3", RSS: 100 * mib}},
				bomb(40, 3*mib)...),
			wantPGID: 50, wantProcs: 40,
		},
		{
			name: "root's group when the user has none",
			procs: []guestProcess{init,
				{PID: 30, PGID: 30, UID: 0, Comm: "root-cmd", RSS: 40 * mib},
			},
			wantPGID: 30, wantProcs: 1,
		},
		{
			name: "a single process when all share pid 1's group",
			procs: []guestProcess{init,
				{PID: 7, PGID: 1, UID: 0, Comm: "child", RSS: 300 * mib},
				{PID: 8, PGID: 1, UID: 0, Comm: "small", RSS: 3 * mib},
			},
			wantPID: 7, wantProcs: 1,
		},
		{name: "only pid 1", procs: []guestProcess{init}, wantNone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, ok := chooseVictim(tt.procs)
			if tt.wantNone {
				if ok {
					t.Fatalf("chooseVictim = %+v, want none", v)
				}
				return
			}
			if !ok || v.PGID != tt.wantPGID || (tt.wantPGID == 0 && v.PID != tt.wantPID) || v.Procs != tt.wantProcs {
				t.Errorf("chooseVictim = %+v, %v; want pgid %d pid %d with %d processes", v, ok, tt.wantPGID, tt.wantPID, tt.wantProcs)
			}
		})
	}
}

func bomb(n int, rss int64) []guestProcess {
	var ps []guestProcess
	for i := range n {
		ps = append(ps, guestProcess{PID: int32(50 + i), PGID: 50, UID: 1000, Comm: "sh", RSS: rss})
	}
	return ps
}

func TestParseProcfs(t *testing.T) {
	out := []byte("PROCFS DUMP\n\n" +
		`{"exe":"/server","status":{"comm":"server","pid":1,"ppid":0,"uid":{"real":0,"effective":0,"saved":0},"vm_size":1000,"vm_rss":2048},"stat":{"pgid":1,"sid":1}}` + "\n\n" +
		`{"status":{"comm":"python3","pid":12,"ppid":3,"uid":{"real":1000,"effective":1000,"saved":1000},"vm_rss":4096},"stat":{"pgid":12,"sid":12}}` + "\n")
	got, err := parseProcfs(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []guestProcess{{PID: 1, PGID: 1, UID: 0, Comm: "server", RSS: 2 << 20}, {PID: 12, PGID: 12, UID: 1000, Comm: "python3", RSS: 4 << 20}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseProcfs = %+v, want %+v", got, want)
	}
}

// TestRunawayRate: a sandbox's runaways cost its guard at most
// runawayBurst at once and then one each runawayEvery; one that comes
// earlier has the guest held frozen until it is due. Code in a sandbox
// started runaways as fast as the guard ended them: 19 in 15 s, 0.11 of a
// core of the host.
func TestRunawayRate(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var r runawayRate
	for i := range runawayBurst {
		if w := r.take(t0); w != 0 {
			t.Fatalf("runaway %d of a burst: held %v, want not", i+1, w)
		}
	}
	// A loop making the next runaway as soon as the guest runs again:
	// one each runawayEvery.
	now := t0
	n := 0
	for now.Before(t0.Add(time.Minute)) {
		w := r.take(now)
		if w <= 0 || w > runawayEvery {
			t.Fatalf("runaway %d past the burst at %v: held %v, want (0, %v]", n+1, now.Sub(t0), w, runawayEvery)
		}
		now = now.Add(w)
		n++
	}
	if want := int(time.Minute / runawayEvery); n > want {
		t.Errorf("%d runaways past the burst in a minute, want at most %d", n, want)
	}
	// One each runawayEvery is never held, nor is a burst after a quiet
	// spell as long.
	r = runawayRate{}
	for i := range 20 {
		if w := r.take(t0.Add(time.Duration(i) * runawayEvery)); w != 0 {
			t.Fatalf("runaway %d at its rate: held %v, want not", i+1, w)
		}
	}
	quiet := t0.Add(20*runawayEvery + runawayBurst*runawayEvery)
	for i := range runawayBurst {
		if w := r.take(quiet); w != 0 {
			t.Fatalf("runaway %d of a burst after a quiet spell: held %v, want not", i+1, w)
		}
	}
}

// TestGuardHold: a hold (a runaway that came early) freezes the guest,
// and a guard that stops (the sandbox paused, killed, the server
// stopping) ends it at once and thaws the guest: a hold never outlives
// its guard or holds up what stops it.
func TestGuardHold(t *testing.T) {
	r := newTestRuntime(t)
	ctx := context.Background()
	spec := sandboxtest.Spec(sandboxtest.BuildRootFS(t))
	spec.Limits.MemoryBytes = 256 << 20
	t.Cleanup(func() { r.Kill(ctx, spec.ID) })
	if err := r.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := sandboxtest.WaitReady(spec.Network, 15*time.Second); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	g := r.guards[spec.ID]
	r.mu.Unlock()
	if g == nil {
		t.Fatal("the sandbox has no memory guard")
	}
	held := make(chan struct{})
	go func() {
		defer close(held)
		g.hold(time.Hour)
	}()
	_, dir := freezerDirs(spec.ID)
	state := filepath.Join(dir, "freezer.state")
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if st, _ := os.ReadFile(state); strings.TrimSpace(string(st)) == "FROZEN" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the guest is not frozen during a hold")
		}
	}
	r.unwatch(spec.ID)
	<-held // a test timeout, not an hour, if the stop does not end it
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("freezer cgroup %s after the hold ended: %v; want it gone (thawed)", dir, err)
	}
	if _, err := sandboxtest.Do(spec.Network, "GET", "/count", nil); err != nil {
		t.Errorf("the sandbox does not answer after the hold: %v", err)
	}
}

// TestGuardUsage: the guard watches memory + swap where the cgroup accounts
// swap, memory alone where it does not — one threshold registered either
// way (each costs a create a kernel RCU grace period) — and a sandbox
// whose memory is partly in swap is over its limit for the guard's poll
// when memory + swap is, with its usage in RAM under it.
func TestGuardUsage(t *testing.T) {
	const limit = 200 << 20
	for _, tc := range []struct {
		name     string
		files    map[string]int64
		wantFile string
		wantOver bool
	}{
		{"no swap accounting, under", map[string]int64{"memory.usage_in_bytes": 100 << 20}, "memory.usage_in_bytes", false},
		{"no swap accounting, over", map[string]int64{"memory.usage_in_bytes": 250 << 20}, "memory.usage_in_bytes", true},
		{"swap accounting, RAM and swap under", map[string]int64{"memory.usage_in_bytes": 100 << 20, "memory.memsw.usage_in_bytes": 150 << 20},
			"memory.memsw.usage_in_bytes", false},
		{"swap accounting, RAM under, RAM and swap over", map[string]int64{"memory.usage_in_bytes": 100 << 20, "memory.memsw.usage_in_bytes": 300 << 20},
			"memory.memsw.usage_in_bytes", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cg := t.TempDir()
			for name, n := range tc.files {
				if err := os.WriteFile(filepath.Join(cg, name), []byte(strconv.FormatInt(n, 10)+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := guardUsage(cg); got != tc.wantFile {
				t.Errorf("guardUsage = %s; want %s", got, tc.wantFile)
			}
			g := &guard{cgroup: cg, usageFile: guardUsage(cg), limit: limit}
			if over := g.usage() >= g.limit; over != tc.wantOver {
				t.Errorf("usage %d over the limit %d = %v; want %v", g.usage(), g.limit, over, tc.wantOver)
			}
		})
	}
}
