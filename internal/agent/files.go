package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/lizard-build/lizard/api"
)

// resolve turns an API path into an absolute one: relative paths are
// relative to the user's home. Any absolute path is allowed: the sandbox,
// not the agent, is the boundary.
func (a *Agent) resolve(p string) (string, error) {
	if p == "" {
		return "", errors.New("must not be empty")
	}
	if strings.ContainsRune(p, 0) {
		return "", errors.New("contains a NUL byte")
	}
	if !filepath.IsAbs(p) {
		p = filepath.Join(a.user.home, p)
	}
	return filepath.Clean(p), nil
}

// pathParam resolves the path query parameter, answering 400 itself.
func (a *Agent) pathParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	p, err := a.resolve(r.URL.Query().Get("path"))
	if err != nil {
		invalid(w, "path", "%v", err)
		return "", false
	}
	return p, true
}

// fileError answers for a failed file operation on p.
func fileError(w http.ResponseWriter, p string, err error) {
	var errno syscall.Errno
	switch {
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, api.CodeNotFound, "%s does not exist", p)
	case errors.As(err, &errno) && (errno == syscall.ENOTDIR || errno == syscall.EISDIR || errno == syscall.ENOTEMPTY || errno == syscall.EEXIST):
		invalid(w, "path", "%v", err)
	case errors.Is(err, fs.ErrPermission):
		invalid(w, "path", "%v", err)
	case errors.As(err, &errno) && errno == syscall.ENOSPC:
		writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "%v", err)
	default:
		writeError(w, http.StatusInternalServerError, api.CodeInternal, "%v", err)
	}
}

func entryInfo(p string, fi fs.FileInfo) api.EntryInfo {
	typ := "other"
	switch {
	case fi.Mode().IsRegular():
		typ = "file"
	case fi.IsDir():
		typ = "dir"
	case fi.Mode()&fs.ModeSymlink != 0:
		typ = "symlink"
	}
	return api.EntryInfo{
		Name:    fi.Name(),
		Path:    p,
		Type:    typ,
		Size:    fi.Size(),
		Mode:    uint32(fi.Mode().Perm()),
		ModTime: fi.ModTime().UTC(),
	}
}

func (a *Agent) readFile(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	f, err := os.Open(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		fileError(w, p, err)
		return
	}
	if fi.IsDir() {
		invalid(w, "path", "%s is a directory", p)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if fi.Mode().IsRegular() {
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size(), 10))
	}
	w.WriteHeader(http.StatusOK)
	// Stream: files may be far larger than the agent should hold.
	if _, err := io.Copy(w, f); err != nil && r.Context().Err() == nil {
		a.log.Warn("sending file", "path", p, "err", err)
	}
}

// writeFile streams the body into a temporary file beside the target and
// renames it into place, so readers never see half a file.
func (a *Agent) writeFile(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	// Writing through a symlink updates its target, as open(2) would.
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	mode := fs.FileMode(0o644)
	if fi, err := os.Stat(p); err == nil {
		if fi.IsDir() {
			invalid(w, "path", "%s is a directory", p)
			return
		}
		mode = fi.Mode().Perm()
	}
	dir := filepath.Dir(p)
	if err := a.user.mkdirAll(dir, 0o755); err != nil {
		fileError(w, dir, err)
		return
	}
	tmp, err := os.CreateTemp(dir, ".lizard-upload-*")
	if err != nil {
		fileError(w, dir, err)
		return
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	body := http.MaxBytesReader(w, r.Body, a.cfg.MaxFileBytes)
	if _, err := io.Copy(tmp, body); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, api.CodeTooLarge, "file is larger than %d bytes", tooBig.Limit)
		case r.Context().Err() != nil:
		default:
			fileError(w, p, fmt.Errorf("writing %s: %w", p, err))
		}
		return
	}
	err = tmp.Chmod(mode)
	if err == nil {
		err = a.user.chown(tmp.Name())
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		fileError(w, p, err)
		return
	}
	committed = true
	fi, err := os.Lstat(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	writeJSON(w, http.StatusOK, entryInfo(p, fi))
}

func (a *Agent) removeFile(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	if p == "/" {
		invalid(w, "path", "refusing to remove /")
		return
	}
	if _, err := os.Lstat(p); err != nil {
		fileError(w, p, err)
		return
	}
	if err := os.RemoveAll(p); err != nil {
		fileError(w, p, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (a *Agent) listDir(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	fi, err := os.Stat(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	if !fi.IsDir() {
		invalid(w, "path", "%s is not a directory", p)
		return
	}
	entries, err := os.ReadDir(p) // sorted by name
	if err != nil {
		fileError(w, p, err)
		return
	}
	list := api.EntryList{Entries: make([]api.EntryInfo, 0, len(entries))}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			continue // removed while listing
		}
		list.Entries = append(list.Entries, entryInfo(filepath.Join(p, e.Name()), info))
	}
	writeJSON(w, http.StatusOK, list)
}

func (a *Agent) statFile(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	writeJSON(w, http.StatusOK, entryInfo(p, fi))
}

func (a *Agent) mkdir(w http.ResponseWriter, r *http.Request) {
	p, ok := a.pathParam(w, r)
	if !ok {
		return
	}
	if err := a.user.mkdirAll(p, 0o755); err != nil {
		fileError(w, p, err)
		return
	}
	fi, err := os.Stat(p)
	if err != nil {
		fileError(w, p, err)
		return
	}
	writeJSON(w, http.StatusOK, entryInfo(p, fi))
}
