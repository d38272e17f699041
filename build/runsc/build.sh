#!/bin/bash
# build.sh VERSION OUT WORK: builds runsc of gVisor VERSION into OUT, static,
# with its seccomp filters precompiled (precompile.go says why), from a copy
# of the module (from the Go module proxy, as `go install` would fetch it)
# in WORK. No Bazel: the copy gets this directory's patches and three Go
# files, runs one of them to write the two filter_precompiled.go files, and
# go-builds runsc.
#
# systrap-self-pid.patch: the systrap platform's rule for
# rt_tgsigqueueinfo names the Sentry's PID as os.Getpid() when the rules
# are built, which in a precompiled program would be the precompiling
# process's PID; the patch makes it the self_pid variable, rendered at
# start with the Sentry's own (precompile.go's second-process check fails
# without it).
#
# pages-reader-parallel.patch: a restore reads the pages file with two
# reads per CPU in flight instead of 128, each of which raised the Sentry's
# GOMAXPROCS by one for the load (threads, scheduling and GC workers for
# copies that a 2-CPU host cannot overlap anyway).
#
# pages-write.patch: a restore loads the pages into the Sentry's memory
# file (a memfd) by pwrite(2)s from a read-only mapping of the pages file,
# instead of preads into the memfd's mapping, which fault in, zero and map
# every page before the copy overwrites it. internal/sandbox/gvisor's
# TestRestorePagesWritten fails without either.
#
# cow-4k.patch: runsc --lizard-copy-written-pages, which Lizard gives a
# sandbox with a template's heap shared from a file (`lizard serve
# --share-heap`, docs/performance.md): a write to a private mapping of a
# file copies only the pages written into the sandbox's memory file, as
# Linux does, instead of the 2 MiB-aligned range around the write. Python
# writes reference counts all over that heap: without it a sandbox takes
# its private copy back within its first calls. Not the default: the .so
# files' private data then copies page by page too, which cost a default
# sandbox's first call ~8 ms more in faults (bench/create_ab.py).
# internal/sandbox/gvisor's TestCopyOnWritePage fails without the patch.
#
# map-copies.patch: under --lizard-copy-written-pages, the first fault in
# a private mapping of a file maps every private copy it holds into the
# process at once. A restored sandbox's shared heap is a checkerboard of
# one-page copies, each a pma of its own that the restore leaves unmapped:
# a fault each (~85 us) where a stub mmap is ~26 us. A new --share-heap
# sandbox's first runCode took 80 ms less (bench/create_ab.py, 30 pairs).
#
# release-after-restore.patch: 3 s after a restore, the Sentry gives its Go
# heap's unused memory back to the host (debug.FreeOSMemory). Decoding the
# kernel's state leaves the heap several MiB over what the Sentry uses
# afterwards, which the Go runtime returns only slowly: an idle restored
# sandbox's Sentry held 15.3 MiB anonymous memory without it, 12.1 with it
# (docs/performance.md, "Density by configuration").
set -euo pipefail
shopt -s nullglob
version=$1 out=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly

mod=$(go mod download -json "gvisor.dev/gvisor@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$mod" ] || { echo "build.sh: gvisor.dev/gvisor@$version not downloaded" >&2; exit 1; }
src=$work/gvisor
rm -rf "$src" && mkdir -p "$work" && cp -r "$mod" "$src" && chmod -R u+w "$src"
# git apply, not patch(1), which a Debian without build tools lacks; the ceiling keeps git from
# taking the copy for part of the checkout around it.
for p in "$here"/*.patch; do (cd "$src" && GIT_CEILING_DIRECTORIES="$work" git apply "$p"); done
mkdir "$src/lizardprecompile"
cp "$here/precompile.go" "$src/lizardprecompile/main.go"
cp "$here/sentry_config.go" "$src/runsc/boot/filter/config/lizard_precompile.go"
cp "$here/gofer_config.go" "$src/runsc/fsgofer/filter/config/lizard_precompile.go"

cd "$src"
# -trimpath and -buildvcs=false make the binary the same wherever WORK is
# (each worktree has its own, inside its git checkout): its hash is part of
# the template cache's key (internal/sandbox/gvisor ImageKey).
go run -trimpath -buildvcs=false -tags lizard_runsc_gen ./lizardprecompile \
	-sentry runsc/boot/filter/filter_precompiled.go -gofer runsc/fsgofer/filter/filter_precompiled.go
go build -trimpath -buildvcs=false -o "$out.tmp" ./runsc
mv "$out.tmp" "$out"
