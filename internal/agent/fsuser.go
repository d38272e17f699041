package agent

import (
	"fmt"
	"net/http"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// File calls act as the user they name (`user`: the sandbox user by
// default, root only when asked), not as the agent: the agent is root in
// the sandbox, and a file call acting as root and giving what it wrote to
// the sandbox user was a way up (a signed upload URL wrote /etc/ld.so.preload,
// then owned by the sandbox user). So a call's permission checks (open,
// create, mkdir, rename, unlink, stat, readdir, inotify_add_watch) are the
// kernel's, made with that user's credentials: what the user could not do
// in a terminal, a file call cannot do either, and what it makes is the
// user's because the user made it.
//
// Credentials are per thread in the kernel (gVisor's Sentry too: each task
// has its own); it is the C library, and Go's syscall.Setuid, that apply a
// change to every thread of a process. A call therefore runs its file
// system work on an OS thread of its own (runtime.LockOSThread), whose
// credentials are set with the raw system calls, and which is never
// unlocked: when its goroutine returns, the runtime ends the thread, so no
// other goroutine ever runs with those credentials, and the agent's other
// threads stay root. Go makes new threads from a locked one through its
// template thread, so none inherits them either.

// fsUser is who a file call acts as; cred nil: the agent's own user.
type fsUser struct {
	name string
	home string
	cred *syscall.Credential
}

// fileUser resolves a file call's user query parameter, answering 400
// itself: the sandbox user by default, or root.
func (fa *fileAPI) fileUser(w http.ResponseWriter, r *http.Request) (fsUser, bool) {
	as, ok := fa.launch.runAs(w, r.URL.Query().Get("user"))
	return fsUser{name: fa.launch.name(as), home: fa.launch.home(as), cred: fa.launch.cred(as)}, ok
}

// do runs fn with u's credentials (see above) and returns its error.
func (u fsUser) do(fn func() error) error {
	if u.cred == nil {
		return fn()
	}
	t, err := startCredThread(u.cred)
	if err != nil {
		return err
	}
	defer t.stop()
	return t.do(fn)
}

// credThread is a goroutine locked to an OS thread with other credentials
// than the agent's, running what it is given until stopped. A watch keeps
// one for its life: every directory it adds is added as its user.
type credThread struct {
	work chan func()
}

// startCredThread starts a thread acting as cred.
func startCredThread(cred *syscall.Credential) (*credThread, error) {
	t := &credThread{work: make(chan func())}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine (above).
		runtime.LockOSThread()
		if err := setThreadCred(cred); err != nil {
			errc <- err
			return
		}
		errc <- nil
		for fn := range t.work {
			fn()
		}
	}()
	if err := <-errc; err != nil {
		return nil, err
	}
	return t, nil
}

// do runs fn on the thread and returns its error; a panic in fn is
// returned as an error rather than ending the agent.
func (t *credThread) do(fn func() error) error {
	errc := make(chan error, 1)
	t.work <- func() {
		defer func() {
			if p := recover(); p != nil {
				errc <- fmt.Errorf("file call panicked: %v", p)
			}
		}()
		errc <- fn()
	}
	return <-errc
}

// stop ends the thread.
func (t *credThread) stop() { close(t.work) }

// setThreadCred gives the calling thread cred's groups, gid and uid, in
// that order (only root may change groups and gids): the raw system calls
// act on this thread alone.
func setThreadCred(cred *syscall.Credential) error {
	groups := cred.Groups
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	// The kernel's gid_t is 32 bits, as Credential.Groups' elements.
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setting the file call's groups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(cred.Gid), uintptr(cred.Gid), uintptr(cred.Gid)); e != 0 {
		return fmt.Errorf("setting the file call's gid %d: %w", cred.Gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(cred.Uid), uintptr(cred.Uid), uintptr(cred.Uid)); e != 0 {
		return fmt.Errorf("setting the file call's uid %d: %w", cred.Uid, e)
	}
	return nil
}
