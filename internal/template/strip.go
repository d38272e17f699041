package template

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// A template's root filesystem is written by code Lizard does not trust:
// a custom template's recipe runs as root in its build sandbox, whose
// gofer writes the tree as host root and keeps mode bits, and the
// interpreter template's Debian packages ship set-id programs. Before a
// build is published to the cache, Strip takes from it everything that
// would be a privilege on the host should a host user ever reach the tree
// (the cache is 0700 root as well; this is the second layer): set-user-ID
// and set-group-ID bits, file capabilities, and device nodes. FIFOs and
// sockets go too: nothing listens on a socket of a finished build, and a
// FIFO makes a host tool that reads the tree block. Programs that need
// them make them at run time, inside the sandbox.
//
// The tree may hold symbolic links to anywhere on the host (a build can
// leave `ln -s /etc/shadow x`): Strip never follows one. It walks with a
// directory file descriptor per level, opened with O_NOFOLLOW relative to
// its parent's; looks at each entry with fstatat(AT_SYMLINK_NOFOLLOW);
// changes modes only through descriptors it opened itself with
// O_NOFOLLOW, after checking they are the inode it looked at; and unlinks
// relative to the directory's descriptor. A path string below the root is
// never resolved, so no link, on any level, is ever followed.

// StripReport counts what Strip changed.
type StripReport struct {
	SetID   int // files and directories whose set-user-ID or set-group-ID bit was cleared
	Caps    int // files whose capabilities were removed
	Special int // device nodes, FIFOs and sockets removed
}

func (r StripReport) String() string {
	return fmt.Sprintf("cleared set-id bits of %d, capabilities of %d, removed %d device nodes, FIFOs and sockets", r.SetID, r.Caps, r.Special)
}

// capXattr holds a file's capabilities, which exec grants like setuid.
const capXattr = "security.capability"

// Strip takes set-id bits, file capabilities, device nodes, FIFOs and
// sockets from the tree at root (a directory, not a link), never following
// a symbolic link.
func Strip(root string) (StripReport, error) {
	var rep StripReport
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return rep, fmt.Errorf("stripping %s: %w", root, err)
	}
	if err := stripDir(fd, root, &rep); err != nil {
		return rep, fmt.Errorf("stripping %s: %w", root, err)
	}
	return rep, nil
}

// stripDir strips the directory open at fd (shown as name in errors) and
// everything below it, and closes fd.
func stripDir(fd int, name string, rep *StripReport) error {
	dir := os.NewFile(uintptr(fd), name)
	defer dir.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if err := clearSetID(fd, st.Mode, rep); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	// Read whole before anything in it is removed: what a directory
	// listing returns while entries go is left unspecified.
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, e := range entries {
		if err := stripEntry(fd, name, e.Name(), rep); err != nil {
			return err
		}
	}
	return nil
}

// stripEntry strips entry base of the directory open at dirfd.
func stripEntry(dirfd int, dirName, base string, rep *StripReport) error {
	name := filepath.Join(dirName, base)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		// Its target is a string to the host: never looked at.
		return nil
	case unix.S_IFCHR, unix.S_IFBLK, unix.S_IFIFO, unix.S_IFSOCK:
		if err := unix.Unlinkat(dirfd, base, 0); err != nil {
			return fmt.Errorf("removing %s: %w", name, err)
		}
		rep.Special++
		return nil
	case unix.S_IFDIR:
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		return stripDir(fd, name, rep)
	case unix.S_IFREG:
		// The capability attribute is removed by a path through the
		// directory's descriptor (/proc/self/fd/N/base: the directory is
		// the one already open, and lremovexattr does not follow base).
		err := unix.Lremovexattr("/proc/self/fd/"+strconv.Itoa(dirfd)+"/"+base, capXattr)
		switch {
		case err == nil:
			rep.Caps++
		case !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.EOPNOTSUPP):
			return fmt.Errorf("removing the capabilities of %s: %w", name, err)
		}
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) == 0 {
			return nil
		}
		// O_NONBLOCK, in case the entry was swapped for a FIFO; the
		// descriptor's own fstat decides.
		fd, err := unix.Openat(dirfd, base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		defer unix.Close(fd)
		var now unix.Stat_t
		if err := unix.Fstat(fd, &now); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if now.Dev != st.Dev || now.Ino != st.Ino || now.Mode&unix.S_IFMT != unix.S_IFREG {
			return fmt.Errorf("%s changed while the template was being stripped", name)
		}
		if err := clearSetID(fd, now.Mode, rep); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// clearSetID clears the set-id bits of the file open at fd, of mode mode.
func clearSetID(fd int, mode uint32, rep *StripReport) error {
	if mode&(unix.S_ISUID|unix.S_ISGID) == 0 {
		return nil
	}
	if err := unix.Fchmod(fd, mode&0o7777&^(unix.S_ISUID|unix.S_ISGID)); err != nil {
		return err
	}
	rep.SetID++
	return nil
}
