package sandbox

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckSwap: a host without swap is refused with the cause and where
// to read; swap devices of any kind, summed, are enough.
func TestCheckSwap(t *testing.T) {
	const header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	for _, tc := range []struct {
		name, swaps string
		ok          bool
	}{
		{"none", header, false},
		{"zram", header + "/dev/zram0                              partition\t8388604\t\t0\t\t100\n", true},
		{"file and zram", header + "/swapfile file\t1048572\t0\t-2\n/dev/zram0 partition\t8388604\t0\t100\n", true},
		{"turned off to 0", header + "/dev/zram0 partition\t0\t0\t100\n", false},
	} {
		path := filepath.Join(t.TempDir(), "swaps")
		if err := os.WriteFile(path, []byte(tc.swaps), 0o600); err != nil {
			t.Fatal(err)
		}
		err := CheckSwap(path, "a VM's idle memory goes nowhere else")
		if tc.ok != (err == nil) {
			t.Errorf("%s: CheckSwap = %v; want ok %v", tc.name, err, tc.ok)
		}
		if err != nil {
			for _, want := range []string{"no swap turned on", "a VM's idle memory goes nowhere else", "docs/operations.md"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: CheckSwap = %v; want it to say %q", tc.name, err, want)
				}
			}
		}
	}
	if err := CheckSwap(filepath.Join(t.TempDir(), "gone"), "x"); err == nil {
		t.Error("CheckSwap of a missing swaps file: nil; want an error")
	}
}
