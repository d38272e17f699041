package gvisor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/lizard-build/lizard/internal/sandbox/hostproc"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/version"
)

// A checkpoint image restores only with the runsc build that made it, and
// an upgrade replaces the runsc binary. So each build a Runtime runs with
// is kept in its directory (KeptRunsc: Dir/runsc/BUILD/runsc, copied at
// New when absent), and a restore of an image whose record names another
// build runs that build's copy. The sandbox is then that build's for good:
// its state, checkpoints, kills and removal are runsc calls that talk to
// its processes, and a checkpoint is written by the sandbox's own Sentry,
// not by the runsc that asks for it — so its next image is that build's
// too, and names it. No runsc rewrites another build's memory image: an
// old build stays kept for as long as an image or a sandbox names it
// (`lizard admin check` lists the ones nothing names, and --repair removes
// them). The sandbox's build is in its runtime record (imageRecord.Runsc),
// read again by a Runtime that finds it running after a restart.

// KeptRunsc is where the Runtime whose Config.Dir is dir keeps runsc build
// (ImageKey's form: gvisor- and 16 hex digits).
func KeptRunsc(dir, build string) string { return filepath.Join(dir, "runsc", build, "runsc") }

// buildPattern is what a build named by a record may be: a record is data
// on disk, and the build becomes a path.
var buildPattern = regexp.MustCompile(`^gvisor-[0-9a-f]{16}$`)

// ValidBuild reports whether build has the form of an ImageKey.
func ValidBuild(build string) bool { return buildPattern.MatchString(build) }

// keepRunsc copies the Runtime's runsc to its KeptRunsc unless a copy of
// that build is there: about 100 MB once per build, a copy_file_range on
// one file system.
func (r *Runtime) keepRunsc() error {
	dst := KeptRunsc(r.root, r.ImageKey())
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		if err := copyKept(r.runsc, dst); err != nil {
			return fmt.Errorf("keeping runsc build %s in %s: %w", r.ImageKey(), filepath.Dir(dst), err)
		}
	} else if err != nil {
		return err
	}
	// The build in use, which `lizard admin check` never lists as unused
	// (it is copied again at the next start anyway).
	return os.WriteFile(filepath.Join(r.root, "runsc", currentName), []byte(r.ImageKey()+"\n"), 0o600)
}

// buildOf is the runsc build that runs sandbox id: the one its record
// names, else (a sandbox booted before records named it, or none) the
// Runtime's own.
func (r *Runtime) buildOf(id string) string {
	r.mu.Lock()
	b, ok := r.builds[id]
	r.mu.Unlock()
	if !ok {
		rec, err := readRecord(filepath.Join(r.dir(id), recordName))
		if err != nil {
			return r.ImageKey()
		}
		b = rec.Runsc
		if b == "" {
			b = r.runningBuild(id, rec)
		}
		r.mu.Lock()
		r.builds[id] = b
		r.mu.Unlock()
	}
	if b == "" {
		return r.ImageKey()
	}
	return b
}

// runningBuild is the build of the runsc that runs sandbox id, whose
// record rec names none: booted by a Lizard that did not record it, and
// running across an upgrade that may have replaced runsc. Its Sentry's
// binary (/proc/PID/exe, readable even once replaced) says which; a build
// other than the Runtime's is kept from it and written into the record, so
// that its checkpoints name, and its runsc calls run, the build that
// writes and reads them. "" (the Runtime's own) when it cannot tell.
func (r *Runtime) runningBuild(id string, rec imageRecord) string {
	pid, err := r.sentryPid(id)
	if err != nil || !hostproc.Alive(pid) {
		return ""
	}
	exe := filepath.Join("/proc", strconv.Itoa(pid), "exe")
	fi, err := os.Stat(exe)
	if err != nil {
		return ""
	}
	if cur, err := os.Stat(r.runsc); err == nil && os.SameFile(fi, cur) {
		return ""
	}
	sum, err := hashFile(exe)
	if err != nil {
		r.log.Warn("reading the runsc build of a sandbox booted before builds were recorded", "sandbox_id", id, "err", err)
		return ""
	}
	build := "gvisor-" + sum
	if build == r.ImageKey() {
		return ""
	}
	dst := KeptRunsc(r.root, build)
	if _, err := os.Stat(dst); errors.Is(err, os.ErrNotExist) {
		if err := copyKept(exe, dst); err != nil {
			r.log.Error("keeping the runsc build of a sandbox booted before builds were recorded", "sandbox_id", id, "build", build, "err", err)
			return ""
		}
	}
	rec.Runsc = build
	if b, err := json.Marshal(rec); err == nil {
		if err := os.WriteFile(filepath.Join(r.dir(id), recordName), b, 0o600); err != nil {
			r.log.Warn("recording the runsc build of a sandbox", "sandbox_id", id, "err", err)
		}
	}
	r.log.Info("a sandbox booted before builds were recorded runs another runsc build: kept, and its own from now on", "sandbox_id", id, "build", build)
	return build
}

// runscOf is the runsc binary of sandbox id's build.
func (r *Runtime) runscOf(id string) string {
	if b := r.buildOf(id); b != r.ImageKey() && ValidBuild(b) {
		return KeptRunsc(r.root, b)
	}
	return r.runsc
}

// restoreBuild is the build that restores the image at imageDir, whose
// record is rec: the one that made it if this Runtime runs it or keeps it,
// the Runtime's own for an image that names none (an older Lizard's, taken
// for the current build's). Any other is refused with ErrOtherBuild before
// runsc runs: a failed attempt would end the sandbox and lose its image.
func (r *Runtime) restoreBuild(id, imageDir string, rec imageRecord) (string, error) {
	if rec.Runsc == "" || rec.Runsc == r.ImageKey() {
		return r.ImageKey(), nil
	}
	if ValidBuild(rec.Runsc) {
		if _, err := os.Stat(KeptRunsc(r.root, rec.Runsc)); err == nil {
			return rec.Runsc, nil
		}
	}
	made := fmt.Sprintf("runsc build %q", rec.Runsc)
	if rec.Lizard != "" {
		made += " (Lizard " + rec.Lizard + ")"
	}
	err := fmt.Errorf("restoring sandbox %s: %w: its image %s was made by %s, which is not kept in %s, and this server runs runsc build %s (Lizard %s), which cannot restore it",
		id, sandbox.ErrOtherBuild, imageDir, made, filepath.Join(r.root, "runsc"), r.ImageKey(), version.Version)
	if ValidBuild(rec.Runsc) {
		err = fmt.Errorf("%w; put that build's runsc binary (the release's that made the image) at %s to restore it with that build", err, KeptRunsc(r.root, rec.Runsc))
	}
	return "", err
}
