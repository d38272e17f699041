package qemu

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/lizard-build/lizard/internal/sandbox/hostproc"
)

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])[:16]
}

// procsNaming returns the processes whose command line has an argument
// naming something below directory s.
func procsNaming(s string) []int {
	return hostproc.Find(func(args []string) bool {
		for _, a := range args {
			if strings.Contains(a, s+"/") {
				return true
			}
		}
		return false
	})
}
