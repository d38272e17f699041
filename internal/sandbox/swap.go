package sandbox

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// CheckSwap says why a host whose swap devices the file swaps lists (in
// /proc/swaps' format) cannot take a sandbox's memory to swap (the node's
// --idle-reclaim), or nil; what says what of a sandbox's memory needs it,
// in its runtime's words.
func CheckSwap(swaps, what string) error {
	b, err := os.ReadFile(swaps)
	if err != nil {
		return fmt.Errorf("reading the host's swap devices: %w", err)
	}
	if swapTotal(b) == 0 {
		return fmt.Errorf("the host has no swap turned on: %s; turn swap on, e.g. zram (docs/operations.md, \"Idle memory to swap\")", what)
	}
	return nil
}

// swapTotal is the size of the swap devices /proc/swaps lists, in KiB.
func swapTotal(swaps []byte) int64 {
	var total int64
	sc := bufio.NewScanner(bytes.NewReader(swaps))
	sc.Scan() // the header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 {
			n, _ := strconv.ParseInt(f[2], 10, 64)
			total += n
		}
	}
	return total
}
