// Command lizard-vminit is process 1 of a QEMU sandbox's guest (package
// vminit); the qemu runtime packs it into the guest's initramfs.
package main

import "github.com/lizard-build/lizard/internal/sandbox/qemu/vminit"

func main() { vminit.Main() }
