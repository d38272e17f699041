package vminit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// ModulesList is the initramfs file naming, in load order, the modules
// under ModulesDir to load: the guest kernel (Debian's cloud kernel) has
// virtio and overlayfs as modules.
const (
	ModulesList = "/modules"
	ModulesDir  = "/lib/modules"
)

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Main is process 1 of the guest. It never returns: when the first process
// ends, or anything fails before it starts, the guest reboots, which QEMU
// (-no-reboot) takes as the end of the sandbox.
func Main() {
	err := run()
	logf("%v; stopping the guest", err)
	unix.Sync()
	_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
	select {}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "lizard-vminit: "+format+"\n", args...)
}

func run() error {
	for _, m := range []struct{ src, dst, typ string }{
		{"devtmpfs", "/dev", "devtmpfs"}, {"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"},
	} {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.typ, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	if b, _ := os.ReadFile("/proc/cmdline"); slices.Contains(strings.Fields(string(b)), ProbeArg) {
		fmt.Println(ProbeMarker)
		return errors.New("probe done")
	}
	if err := loadModules(); err != nil {
		return err
	}
	port, err := openPort()
	if err != nil {
		return err
	}
	g := &guest{port: port, enc: json.NewEncoder(port)}
	// While no host is connected, reads of the port return at once with
	// nothing (and poll says hang-up); the driver signals SIGIO when one
	// connects, so the guest sleeps until then.
	sigio := make(chan os.Signal, 1)
	signal.Notify(sigio, unix.SIGIO)
	if _, err := unix.FcntlInt(port.Fd(), unix.F_SETOWN, os.Getpid()); err != nil {
		logf("asking for SIGIO on the control port: %v", err)
	}
	if fl, err := unix.FcntlInt(port.Fd(), unix.F_GETFL, 0); err == nil {
		_, _ = unix.FcntlInt(port.Fd(), unix.F_SETFL, fl|unix.O_ASYNC)
	}
	for {
		sc := bufio.NewScanner(port)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var req Request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				g.reply(Reply{Error: fmt.Sprintf("decoding request: %v", err)})
				continue
			}
			g.reply(g.handle(req))
		}
		if err := sc.Err(); err != nil {
			logf("reading the control port: %v", err)
		}
		select {
		case <-sigio:
		case <-time.After(time.Second):
		}
	}
}

type guest struct {
	port    *os.File
	enc     *json.Encoder
	mu      sync.Mutex
	started bool
}

func (g *guest) reply(r Reply) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if err := g.enc.Encode(r); err != nil {
		logf("answering the host: %v", err)
	}
}

func (g *guest) handle(req Request) Reply {
	if req.TimeUnixNano > 0 {
		ts := unix.NsecToTimespec(req.TimeUnixNano)
		if err := unix.ClockSettime(unix.CLOCK_REALTIME, &ts); err != nil {
			logf("setting the clock: %v", err)
		}
	}
	switch req.Op {
	case "start":
		if g.started || req.Start == nil {
			return Reply{Error: "start: already started, or nothing to start"}
		}
		g.started = true
		pid, err := start(*req.Start)
		if err != nil {
			// The host removes the VM on this answer; nothing else runs.
			return Reply{Error: err.Error()}
		}
		go reap(pid)
		return Reply{OK: true, Pid: pid}
	case "net":
		if req.Net == nil {
			return Reply{Error: "net: no address"}
		}
		if err := configureNet(*req.Net); err != nil {
			return Reply{Error: err.Error()}
		}
		return Reply{OK: true}
	}
	return Reply{Error: fmt.Sprintf("unknown op %q", req.Op)}
}

func loadModules() error {
	b, err := os.ReadFile(ModulesList)
	if err != nil {
		return fmt.Errorf("reading the module list: %w", err)
	}
	for _, name := range strings.Fields(string(b)) {
		f, err := os.Open(filepath.Join(ModulesDir, name+".ko"))
		if err != nil {
			return fmt.Errorf("loading module %s: %w", name, err)
		}
		err = unix.FinitModule(int(f.Fd()), "", 0)
		f.Close()
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("loading module %s: %w", name, err)
		}
	}
	return nil
}

// openPort waits for the control port's device: the virtio drivers probe
// while the modules load, and under emulation that takes a moment.
func openPort() (*os.File, error) {
	for i := 0; ; i++ {
		ents, _ := os.ReadDir("/sys/class/virtio-ports")
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join("/sys/class/virtio-ports", e.Name(), "name"))
			if err == nil && strings.TrimSpace(string(b)) == PortName {
				return os.OpenFile("/dev/"+e.Name(), os.O_RDWR, 0)
			}
		}
		if i%500 == 499 {
			logf("still waiting for the control port %s", PortName)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// disk returns the device node of the virtio disk with serial s.
func disk(s string) (string, error) {
	ents, _ := os.ReadDir("/sys/block")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/sys/block", e.Name(), "serial"))
		if err == nil && strings.TrimSpace(string(b)) == s {
			return "/dev/" + e.Name(), nil
		}
	}
	return "", fmt.Errorf("no disk with serial %s", s)
}

func mount(src, dst, typ string, flags uintptr, data string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("mounting %s: %w", dst, err)
	}
	if err := unix.Mount(src, dst, typ, flags, data); err != nil {
		return fmt.Errorf("mounting %s on %s: %w", typ, dst, err)
	}
	return nil
}

// start makes the sandbox's root, moves into it and starts its first
// process.
func start(s Start) (int, error) {
	if err := enterRoot(s); err != nil {
		return 0, err
	}

	cg, err := sandboxCgroup(s.Pids)
	if err != nil {
		return 0, err
	}
	defer unix.Close(cg)
	attr := &unix.SysProcAttr{Setsid: true, UseCgroupFD: true, CgroupFD: cg}
	nofile := uint64(1 << 20)
	if s.OpenFiles > 0 {
		nofile = uint64(s.OpenFiles)
	}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: nofile, Max: nofile}); err != nil {
		return 0, fmt.Errorf("setting RLIMIT_NOFILE: %w", err)
	}
	if s.Processes > 0 {
		// Inherited by all the first process starts; root (the agent)
		// is exempt, the sandbox user is not.
		n := uint64(s.Processes)
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			return 0, fmt.Errorf("setting RLIMIT_NPROC: %w", err)
		}
	}

	env := slices.Clone(s.Env)
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		env = append([]string{defaultPath}, env...)
	}
	if len(s.Args) == 0 {
		return 0, errors.New("no first process given")
	}
	console, err := os.OpenFile("/dev/console", os.O_WRONLY, 0)
	if err != nil {
		return 0, fmt.Errorf("opening the console: %w", err)
	}
	defer console.Close()
	devnull, err := os.Open("/dev/null")
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	path := s.Args[0]
	if !strings.Contains(path, "/") {
		// LookPath reads this process's PATH; the first process's counts.
		os.Setenv("PATH", strings.TrimPrefix(env[slices.IndexFunc(env, func(e string) bool { return strings.HasPrefix(e, "PATH=") })], "PATH="))
		if path, err = exec.LookPath(path); err != nil {
			return 0, fmt.Errorf("starting %s: %w", s.Args[0], err)
		}
	}
	p, err := os.StartProcess(path, s.Args, &os.ProcAttr{Dir: "/", Env: env, Files: []*os.File{devnull, console, console}, Sys: attr})
	if err != nil {
		return 0, fmt.Errorf("starting %s: %w", s.Args[0], err)
	}
	return p.Pid, nil
}

// enterRoot makes the sandbox's root — the template's disk under an
// overlay on the writable disk, the kernel's file systems, the injected
// files, the network — and makes it this process's root, as the first
// process will see it.
func enterRoot(s Start) error {
	root, err := disk(SerialRoot)
	if err != nil {
		return err
	}
	upper, err := disk(SerialUpper)
	if err != nil {
		return err
	}
	if err := mount(root, "/lower", "ext4", unix.MS_RDONLY, ""); err != nil {
		return err
	}
	if err := mount(upper, "/upper", "ext4", unix.MS_NOATIME, ""); err != nil {
		return err
	}
	for _, d := range []string{"/upper/root", "/upper/work"} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if err := mount("overlay", "/newroot", "overlay", 0, "lowerdir=/lower,upperdir=/upper/root,workdir=/upper/work"); err != nil {
		return err
	}
	nr := func(p string) string { return filepath.Join("/newroot", p) }
	for _, m := range []struct {
		src, dst, typ string
		flags         uintptr
		data          string
	}{
		{"proc", "/proc", "proc", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"sysfs", "/sys", "sysfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, ""},
		{"devtmpfs", "/dev", "devtmpfs", unix.MS_NOSUID, ""},
		{"devpts", "/dev/pts", "devpts", unix.MS_NOSUID | unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"},
		{"shm", "/dev/shm", "tmpfs", unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, "mode=1777,size=65536k"},
	} {
		if err := mount(m.src, nr(m.dst), m.typ, m.flags, m.data); err != nil {
			return err
		}
	}
	_ = os.Remove(nr("/dev/ptmx"))
	_ = os.Symlink("pts/ptmx", nr("/dev/ptmx"))
	if err := os.MkdirAll(nr("/tmp"), 0o1777); err == nil {
		_ = os.Chmod(nr("/tmp"), 0o1777)
	}
	if len(s.Files) > 0 {
		files, err := disk(SerialFiles)
		if err != nil {
			return err
		}
		if err := mount(files, "/files", "ext4", unix.MS_RDONLY, ""); err != nil {
			return err
		}
		for _, f := range s.Files {
			if err := bindFile(filepath.Join("/files", f.Name), nr(f.Target)); err != nil {
				return err
			}
		}
	}
	if err := configureNet(s.Net); err != nil {
		return err
	}
	_ = unix.Sethostname([]byte("lizard"))

	if err := os.Chdir("/newroot"); err != nil {
		return err
	}
	if err := unix.Mount(".", "/", "", unix.MS_MOVE, ""); err != nil {
		return fmt.Errorf("moving the root: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("entering the root: %w", err)
	}
	_ = os.Chdir("/")
	return nil
}

// bindFile shows host file src read-only at dst, made (empty) if missing.
func bindFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("placing %s: %w", dst, err)
	}
	if _, err := os.Lstat(dst); errors.Is(err, os.ErrNotExist) {
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
		if err != nil {
			return fmt.Errorf("placing %s: %w", dst, err)
		}
		f.Close()
	}
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("binding %s: %w", dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", dst, err)
	}
	return nil
}

// sandboxCgroup makes the cgroup the first process starts in and
// returns it open for clone3's CLONE_INTO_CGROUP. It bounds the tasks to
// pids (0: no bound) and the memory to all the guest has but a reserve
// for its kernel and init: a runaway program then meets the cgroup's OOM
// killer, which ends it alone and at once, instead of the guest thrashing
// through its page cache (slow, under emulation, for many seconds) until
// the kernel's own gives up.
func sandboxCgroup(pids int64) (int, error) {
	const root = "/sys/fs/cgroup"
	if err := os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids +memory"), 0o644); err != nil {
		return 0, fmt.Errorf("enabling the cgroup controllers: %w", err)
	}
	dir := filepath.Join(root, "sandbox")
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return 0, fmt.Errorf("making the sandbox's cgroup: %w", err)
	}
	if pids > 0 {
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0o644); err != nil {
			return 0, fmt.Errorf("bounding the sandbox's processes: %w", err)
		}
	}
	if total := memTotal(); total > 0 {
		reserve := min(max(total/10, 24<<20), 128<<20)
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(total-reserve, 10)), 0o644); err != nil {
			return 0, fmt.Errorf("bounding the sandbox's memory: %w", err)
		}
	}
	return unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
}

// memTotal is the guest's memory as its kernel counts it, in bytes.
func memTotal() int64 {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// reap waits for every process that ends (orphans come to process 1) and
// stops the guest when the first process has ended.
func reap(first int) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if pid == first {
			logf("the first process ended (%v); stopping the guest", describe(ws))
			unix.Sync()
			_ = unix.Reboot(unix.LINUX_REBOOT_CMD_RESTART)
		}
	}
}

func describe(ws unix.WaitStatus) string {
	if ws.Signaled() {
		return "signal " + ws.Signal().String()
	}
	return "exit status " + strconv.Itoa(ws.ExitStatus())
}

// configureNet gives eth0 n's address, alone, and the default route via
// n's gateway; lo comes up too.
func configureNet(n Net) error {
	ip := net.ParseIP(n.Addr)
	gw := net.ParseIP(n.Gateway)
	if ip == nil || gw == nil || n.PrefixLen <= 0 || n.PrefixLen > 32 {
		return fmt.Errorf("configuring the network: bad address %q/%d via %q", n.Addr, n.PrefixLen, n.Gateway)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	var eth netlink.Link
	var err error
	for range 500 { // the driver may still be probing
		if eth, err = netlink.LinkByName("eth0"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("configuring the network: %w", err)
	}
	old, _ := netlink.AddrList(eth, netlink.FAMILY_V4)
	for _, a := range old {
		_ = netlink.AddrDel(eth, &a)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(n.PrefixLen, 32)}}
	if err := netlink.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("configuring the network: adding %s: %w", addr, err)
	}
	if err := netlink.LinkSetUp(eth); err != nil {
		return fmt.Errorf("configuring the network: %w", err)
	}
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw}); err != nil {
		return fmt.Errorf("configuring the network: default route via %s: %w", gw, err)
	}
	// Neighbours of the old link (a restored guest's former host side)
	// would only answer for addresses that are no longer there.
	neighs, _ := netlink.NeighList(eth.Attrs().Index, netlink.FAMILY_V4)
	for _, nb := range neighs {
		_ = netlink.NeighDel(&nb)
	}
	return nil
}
