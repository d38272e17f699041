package netns

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestRetryDump(t *testing.T) {
	for _, tc := range []struct {
		name        string
		interrupted int // how many answers are interrupted before a clean one
		wantErr     bool
	}{
		{"clean", 0, false},
		{"interrupted then clean", 3, false},
		{"always interrupted", dumpTries, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			out, err := retryDump(func() ([]int, error) {
				calls++
				if calls <= tc.interrupted {
					return []int{-1}, netlink.ErrDumpInterrupted
				}
				return []int{1, 2}, nil
			})
			if tc.wantErr {
				if !errors.Is(err, netlink.ErrDumpInterrupted) || out != nil {
					t.Fatalf("got %v, %v; want no results and ErrDumpInterrupted", out, err)
				}
				return
			}
			if err != nil || len(out) != 2 || calls != tc.interrupted+1 {
				t.Fatalf("got %v, %v after %d calls; want [1 2] after %d", out, err, calls, tc.interrupted+1)
			}
		})
	}
}
