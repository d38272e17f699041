package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/lizard-build/lizard/api"
	"github.com/lizard-build/lizard/internal/chunkcopy"
)

// resolve turns an API path into an absolute one: relative paths are
// relative to home (the acting user's). Any absolute path is allowed: the
// sandbox, not the agent, is the boundary, and the call acts as its user.
func resolve(p, home string) (string, error) {
	if p == "" {
		return "", errors.New("must not be empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(home, p)
	}
	return filepath.Clean(p), nil
}

// fileAPI serves /files: reads, writes, lists and watches of the
// sandbox's file system, each acting as the user the call names
// (fsuser.go).
type fileAPI struct {
	launch   *launcher // whose users a call may act as
	maxBytes int64     // bounds one read or write
	log      *slog.Logger
	watches  watchBudget
}

// fileCall resolves a file call's user and path query parameters,
// answering 400 itself.
func (fa *fileAPI) fileCall(w http.ResponseWriter, r *http.Request) (fsUser, string, bool) {
	u, ok := fa.fileUser(w, r)
	if !ok {
		return u, "", false
	}
	p, err := resolve(r.URL.Query().Get("path"), u.home)
	if err != nil {
		invalid(w, "path", "%v", err)
		return u, "", false
	}
	return u, p, true
}

// fileError answers for a failed file operation on p.
func fileError(w http.ResponseWriter, p string, err error) {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, api.CodeNotFound, "%s does not exist", p)
	case errors.As(err, &errno) && (errno == syscall.ENOTDIR || errno == syscall.EISDIR || errno == syscall.ENOTEMPTY ||
		errno == syscall.EEXIST || errno == syscall.EINVAL || errno == syscall.EBUSY || errno == syscall.EXDEV || errno == syscall.EROFS):
		invalid(w, "path", "%v", err)
	case errors.Is(err, fs.ErrPermission):
		invalid(w, "path", "%v", err)
	case errors.As(err, &errno) && (errno == syscall.ENOSPC || errno == syscall.EDQUOT):
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "the sandbox's disk is full (its diskMb limit): %v", err)
	default:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
	}
}

// fileError is fileError for a call acting as u: a refusal by the
// kernel's permission checks names the user and how to act as root.
func (u fsUser) fileError(w http.ResponseWriter, p string, err error) {
	var pe *os.PathError
	switch {
	case errors.As(err, &pe) && pe.Op == "write" && errors.Is(err, syscall.EISDIR):
		invalid(w, "path", "%s is a directory", p)
	case errors.As(err, &pe) && pe.Op == "list" && errors.Is(err, syscall.ENOTDIR):
		invalid(w, "path", "%s is not a directory", p)
	case errors.Is(err, fs.ErrPermission) && u.cred != nil:
		invalid(w, "path", "%v: the call acts as %q (its user parameter), who may not do this; pass user \"root\" to act as root", err, u.name)
	default:
		fileError(w, p, err)
	}
}

// entryType is the API's type of a file of mode m.
func entryType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	}
	return "other"
}

// entryInfo describes p, whose Lstat is fi; names resolves its owner.
func entryInfo(p string, fi fs.FileInfo, names *idNames) api.EntryInfo {
	typ := entryType(fi.Mode())
	info := api.EntryInfo{
		Name:        fi.Name(),
		Path:        p,
		Type:        typ,
		Size:        fi.Size(),
		Mode:        uint32(fi.Mode().Perm()),
		ModTime:     fi.ModTime().UTC(),
		Permissions: permissions(fi.Mode()),
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		info.Owner, info.Group = names.user(st.Uid), names.group(st.Gid)
	}
	if typ == "symlink" {
		// A symlink swapped for a file meanwhile reads as no target.
		info.SymlinkTarget, _ = os.Readlink(p)
	}
	return info
}

// resolveLink describes the symlink info at p by what it points to, as
// E2B's envd does (resolveSymlinks): type and mode are its target's, and
// symlinkTarget is the target's absolute path with every link on the way
// resolved. A link that resolves to nothing (dangling, a loop, a directory
// the user may not search) is type other, mode 0, and names itself, as in
// envd. Name, path, size, permissions, owner and times stay the link's.
// Run as the call's user: what it cannot resolve, it does not see.
func resolveLink(info *api.EntryInfo) {
	if info.Type != "symlink" {
		return
	}
	info.Type, info.Mode, info.SymlinkTarget = "other", 0, info.Path
	target, err := filepath.EvalSymlinks(info.Path)
	if err != nil {
		return
	}
	info.SymlinkTarget = target
	if fi, err := os.Stat(target); err == nil {
		info.Type, info.Mode = entryType(fi.Mode()), uint32(fi.Mode().Perm())
	}
}

// resolveSymlinks reads a stat's or list's resolveSymlinks parameter,
// answering 400 itself.
func resolveSymlinks(w http.ResponseWriter, r *http.Request) (resolve, ok bool) {
	v := r.URL.Query().Get("resolveSymlinks")
	if v == "" {
		return false, true
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		invalid(w, "resolveSymlinks", "must be true or false, not %q", v)
		return false, false
	}
	return b, true
}

// permissions is mode as ls -l shows it: the type letter, then rwx
// triples with setuid, setgid and sticky folded in.
func permissions(m fs.FileMode) string {
	b := []byte("----------")
	switch {
	case m.IsDir():
		b[0] = 'd'
	case m&fs.ModeSymlink != 0:
		b[0] = 'l'
	case m&fs.ModeNamedPipe != 0:
		b[0] = 'p'
	case m&fs.ModeSocket != 0:
		b[0] = 's'
	case m&fs.ModeCharDevice != 0:
		b[0] = 'c'
	case m&fs.ModeDevice != 0:
		b[0] = 'b'
	}
	const rwx = "rwxrwxrwx"
	for i := range 9 {
		if m&(1<<uint(8-i)) != 0 {
			b[i+1] = rwx[i]
		}
	}
	special := func(i int, set bool, lower, upper byte) {
		if !set {
			return
		}
		if b[i] == '-' {
			b[i] = upper
		} else {
			b[i] = lower
		}
	}
	special(3, m&fs.ModeSetuid != 0, 's', 'S')
	special(6, m&fs.ModeSetgid != 0, 's', 'S')
	special(9, m&fs.ModeSticky != 0, 't', 'T')
	return string(b)
}

// idNames names uids and gids from the sandbox's /etc/passwd and
// /etc/group, once each per call (a listing of a thousand files owned by
// one user reads them once).
type idNames struct{ users, groups map[uint32]string }

func (n *idNames) user(uid uint32) string {
	return n.lookup(&n.users, uid, func(id string) (string, error) {
		u, err := user.LookupId(id)
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func (n *idNames) group(gid uint32) string {
	return n.lookup(&n.groups, gid, func(id string) (string, error) {
		g, err := user.LookupGroupId(id)
		if err != nil {
			return "", err
		}
		return g.Name, nil
	})
}

func (n *idNames) lookup(m *map[uint32]string, id uint32, find func(string) (string, error)) string {
	if name, ok := (*m)[id]; ok {
		return name
	}
	if *m == nil {
		*m = map[uint32]string{}
	}
	s := strconv.FormatUint(uint64(id), 10)
	if name, err := find(s); err == nil {
		s = name
	}
	(*m)[id] = s
	return s
}

func (fa *fileAPI) readFile(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	var f *os.File
	var fi fs.FileInfo
	err := u.do(func() (err error) {
		if f, err = os.Open(p); err != nil {
			return err
		}
		if fi, err = f.Stat(); err != nil {
			f.Close()
		}
		return err
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	defer f.Close()
	if fi.IsDir() {
		invalid(w, "path", "%s is a directory", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	// The length is not the stat's: /proc and /sys files stat as 0 bytes
	// and a file may grow or shrink as it is read. A Content-Length from
	// the stat cut such a file to its stat's size (nothing, for /proc),
	// and the short or long body made net/http close the connection after
	// the answer, which the caller had already taken back to its pool: its
	// next request on it (a command's start, not retried) failed. So a
	// file that ends within the first chunk read is sent with that
	// length, exactly; a longer one is streamed chunked to its real end.
	// The file is open, so this needs no credentials: it runs on any
	// thread.
	buf := make([]byte, copyChunk)
	n, err := io.ReadFull(f, buf)
	switch {
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(http.StatusOK)
		_, err = w.Write(buf[:n])
	case err != nil:
		u.fileError(w, p, err)
		return
	default:
		w.WriteHeader(http.StatusOK)
		if _, err = w.Write(buf[:n]); err == nil {
			// Stream: files may be far larger than the agent should hold.
			_, err = chunkcopy.Copy(w, f, buf)
		}
	}
	if err != nil && r.Context().Err() == nil {
		fa.log.Warn("sending file", "path", p, "err", err)
	}
}

// copyChunk is how much of a file the agent moves per write. Every system
// call is a round trip to gVisor's Sentry: a 256 MiB file written in
// io.Copy's 32 KiB pieces went at 170-240 MB/s in a sandbox here, in 1 MiB
// pieces at over 1 GB/s. An upload's body comes in pieces as small as the
// sender's chunks or TCP segments (the API's proxy passes a chunked one on
// in 1 MiB chunks, agentproxy.uploadChunk, a Content-Length one in 32 KiB
// writes), so copyFile gathers a whole chunk before each write; a transfer
// holds one chunk of memory.
const copyChunk = 1 << 20

// copyFile copies src to dst in copyChunk writes (the last one shorter).
func copyFile(dst io.Writer, src io.Reader) (int64, error) {
	return chunkcopy.Copy(dst, src, make([]byte, copyChunk))
}

// The temporary file an upload is written to, beside its path, before
// it is renamed over it: its name says whether the upload makes the file
// or replaces one, which a watch reports as an in-place write would be
// (files_watch.go). Both start with uploadTemp.
const (
	uploadTemp     = ".lizard-upload-"
	uploadTempNew  = uploadTemp + "new-"
	uploadTempOver = uploadTemp + "over-"
)

// writeFile streams the body into a temporary file beside the target and
// renames it into place, so readers never see half a file. The temporary
// file is made, and renamed, as the call's user, who thus owns what it
// wrote; the body is copied into it on the handler's goroutine.
func (fa *fileAPI) writeFile(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	// Refused before anything is made: a refused upload leaves no file.
	md, err := parseMetadata(r.URL.Query())
	if err != nil {
		invalid(w, "metadata", "%v", err)
		return
	}
	var tmp *os.File
	mode := fs.FileMode(0o644)
	temp := uploadTempNew
	err = u.do(func() error {
		// Writing through a symlink updates its target, as open(2) would.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if fi, err := os.Stat(p); err == nil {
			if fi.IsDir() {
				return &os.PathError{Op: "write", Path: p, Err: syscall.EISDIR}
			}
			mode = fi.Mode().Perm()
			temp = uploadTempOver
		}
		dir := filepath.Dir(p)
		if err := mkdirAll(dir); err != nil {
			return err
		}
		var err error
		tmp, err = os.CreateTemp(dir, temp+"*")
		return err
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			// As the user who made it, in the directory it could write.
			_ = u.do(func() error { return os.Remove(tmp.Name()) })
		}
	}()
	body := http.MaxBytesReader(w, r.Body, fa.maxBytes)
	if _, err := copyFile(tmp, body); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "file is larger than %d bytes", tooBig.Limit)
		case r.Context().Err() != nil:
		default:
			u.fileError(w, p, fmt.Errorf("writing %s: %w", p, err))
		}
		return
	}
	var info api.EntryInfo
	err = u.do(func() error {
		// The file is new (renamed over the old one), so its metadata is
		// md alone: an upload without any leaves none of the old file's.
		err := setMetadata(tmp, md)
		if err == nil {
			err = tmp.Chmod(mode)
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), p)
		}
		if err != nil {
			return err
		}
		committed = true
		fi, err := os.Lstat(p)
		if err == nil {
			info = entryInfo(p, fi, new(idNames))
			readMetadata(&info)
		}
		return err
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, info)
}

// mkdirAll is os.MkdirAll run as the call's user: what it makes is theirs.
func mkdirAll(dir string) error {
	fi, err := os.Stat(dir)
	if err == nil && !fi.IsDir() {
		return &os.PathError{Op: "mkdir", Path: dir, Err: syscall.ENOTDIR}
	}
	return os.MkdirAll(dir, 0o755)
}

func (fa *fileAPI) removeFile(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	if p == "/" {
		invalid(w, "path", "refusing to remove /")
		return
	}
	err := u.do(func() error {
		if _, err := os.Lstat(p); err != nil {
			return err
		}
		return os.RemoveAll(p)
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (fa *fileAPI) listDir(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	resolve, ok := resolveSymlinks(w, r)
	if !ok {
		return
	}
	var list api.EntryList
	err := u.do(func() error {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &os.PathError{Op: "list", Path: p, Err: syscall.ENOTDIR}
		}
		entries, err := os.ReadDir(p) // sorted by name
		if err != nil {
			return err
		}
		list.Entries = make([]api.EntryInfo, 0, len(entries))
		names := new(idNames)
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				continue // removed while listing
			}
			entry := entryInfo(filepath.Join(p, e.Name()), info, names)
			if resolve {
				resolveLink(&entry)
			}
			readMetadata(&entry)
			list.Entries = append(list.Entries, entry)
		}
		return nil
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, list)
}

func (fa *fileAPI) statFile(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	resolve, ok := resolveSymlinks(w, r)
	if !ok {
		return
	}
	var info api.EntryInfo
	err := u.do(func() error {
		fi, err := os.Lstat(p)
		if err == nil {
			info = entryInfo(p, fi, new(idNames))
			if resolve {
				resolveLink(&info)
			}
			readMetadata(&info)
		}
		return err
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, info)
}

func (fa *fileAPI) mkdir(w http.ResponseWriter, r *http.Request) {
	u, p, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	var info api.EntryInfo
	err := u.do(func() error {
		if err := mkdirAll(p); err != nil {
			return err
		}
		fi, err := os.Stat(p)
		if err == nil {
			info = entryInfo(p, fi, new(idNames))
		}
		return err
	})
	if err != nil {
		u.fileError(w, p, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, info)
}

// rename moves path to to, as rename(2): a file at to is replaced, an empty
// directory too; to's directory must exist. It answers the entry at its
// new place.
func (fa *fileAPI) rename(w http.ResponseWriter, r *http.Request) {
	u, from, ok := fa.fileCall(w, r)
	if !ok {
		return
	}
	to, err := resolve(r.URL.Query().Get("to"), u.home)
	if err != nil {
		invalid(w, "to", "%v", err)
		return
	}
	if from == "/" || to == "/" {
		invalid(w, "path", "refusing to rename /")
		return
	}
	var info api.EntryInfo
	failed := from
	err = u.do(func() error {
		if _, err := os.Lstat(from); err != nil {
			return err
		}
		failed = to
		if err := os.Rename(from, to); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				// from was there a moment ago: to's directory is missing.
				failed = filepath.Dir(to)
			}
			return err
		}
		fi, err := os.Lstat(to)
		if err == nil {
			info = entryInfo(to, fi, new(idNames))
			readMetadata(&info)
		}
		return err
	})
	if err != nil {
		u.fileError(w, failed, err)
		return
	}
	api.WriteJSON(w, http.StatusOK, info)
}

// disk answers statfs of the sandbox's root: under gVisor its overlay's
// upper layer, sized by the sandbox's disk limit, so what the guest's df
// shows and what fills the limit are the same numbers.
func (fa *fileAPI) disk(w http.ResponseWriter, r *http.Request) {
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err != nil {
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "statfs /: %v", err)
		return
	}
	bs := int64(st.Bsize)
	api.WriteJSON(w, http.StatusOK, api.DiskUsage{UsedBytes: int64(st.Blocks-st.Bfree) * bs, TotalBytes: int64(st.Blocks) * bs})
}
