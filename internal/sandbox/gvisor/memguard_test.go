package gvisor

import (
	"testing"
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
