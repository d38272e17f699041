package qemu

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/lizard-build/lizard/internal/sandbox"
	"github.com/lizard-build/lizard/internal/sandbox/qemu/vminit"
)

// modules are the guest kernel's modules the guest needs: Debian's cloud
// kernel builds virtio and overlayfs as modules. What they depend on is
// read from the modules themselves (loadOrder).
var modules = []string{"virtio_pci", "virtio_blk", "virtio_net", "virtio_console", "overlay"}

// loadOrder returns the paths of names and of every module they depend
// on, each after its dependencies, as their .modinfo's depends= says.
func loadOrder(modDir string, names []string) (order []string, paths map[string]string, err error) {
	paths = map[string]string{}
	state := map[string]int{} // 1: visiting, 2: done
	var visit func(string) error
	visit = func(name string) error {
		switch state[name] {
		case 1:
			return fmt.Errorf("module %s depends on itself", name)
		case 2:
			return nil
		}
		state[name] = 1
		p, err := modulePath(modDir, name)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if i := bytes.Index(b, []byte("\x00depends=")); i >= 0 {
			rest := b[i+len("\x00depends="):]
			if j := bytes.IndexByte(rest, 0); j >= 0 {
				for _, dep := range strings.Split(string(rest[:j]), ",") {
					if dep = strings.ReplaceAll(strings.TrimSpace(dep), "-", "_"); dep != "" {
						if err := visit(dep); err != nil {
							return err
						}
					}
				}
			}
		}
		state[name] = 2
		paths[name] = p
		order = append(order, name)
		return nil
	}
	for _, n := range names {
		if err := visit(n); err != nil {
			return nil, nil, err
		}
	}
	return order, paths, nil
}

// findKernel returns the kernel image and the modules directory of the
// Debian kernel package unpacked (dpkg-deb -x) under dir.
func findKernel(dir string) (kernel, modDir string, err error) {
	m, _ := filepath.Glob(filepath.Join(dir, "boot", "vmlinuz-*"))
	if len(m) == 0 {
		return "", "", fmt.Errorf("no guest kernel (boot/vmlinuz-*) under %s: run make qemu-kernel", dir)
	}
	kernel = m[len(m)-1]
	version := strings.TrimPrefix(filepath.Base(kernel), "vmlinuz-")
	modDir = filepath.Join(dir, "lib", "modules", version, "kernel")
	if _, err := os.Stat(modDir); err != nil {
		return "", "", fmt.Errorf("guest kernel modules of %s: %w", version, err)
	}
	return kernel, modDir, nil
}

// kernelStub returns the head of a bzImage kernel: its boot sector and
// setup code, as long as the boot protocol's header says, and a page
// more. A restored VM gets it as its -kernel instead of the kernel: QEMU
// keeps a copy of the kernel in its own memory for the firmware to load
// at boot (14 MiB for Debian's cloud kernel, in every VM), while a
// restored guest is past its boot and never loads it again (with
// -no-reboot a reset ends QEMU). QEMU still reads the header, so it must
// be the real one.
func kernelStub(kernel []byte) ([]byte, error) {
	const hdr = 0x202 // "HdrS": the boot protocol's header
	if len(kernel) < hdr+4 || string(kernel[hdr:hdr+4]) != "HdrS" {
		return nil, errors.New("not a bzImage kernel (no HdrS boot header)")
	}
	sects := int(kernel[0x1f1])
	if sects == 0 {
		sects = 4
	}
	n := (sects+1)*512 + 4096
	if n > len(kernel) {
		return nil, fmt.Errorf("bzImage kernel of %d bytes shorter than its setup (%d)", len(kernel), n)
	}
	return kernel[:n], nil
}

// writeKernelStub writes kernel's stub (kernelStub) at dst.
func writeKernelStub(dst, kernel string) error {
	b, err := os.ReadFile(kernel)
	if err != nil {
		return err
	}
	stub, err := kernelStub(b)
	if err != nil {
		return fmt.Errorf("%s: %w", kernel, err)
	}
	return writeAtomic(dst, stub)
}

// modulePath finds module name (its file name, with - or _) under modDir.
func modulePath(modDir, name string) (string, error) {
	var found string
	err := filepath.WalkDir(modDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if base := strings.ReplaceAll(d.Name(), "-", "_"); !d.IsDir() && base == name+".ko" {
			found = p
			return fs.SkipAll
		}
		return nil
	})
	if err == nil && found == "" {
		err = fmt.Errorf("module %s not found under %s", name, modDir)
	}
	return found, err
}

// buildInitramfs writes, at dst, the guest's initramfs: the init binary
// as /init, the modules and their list, and a console device node so
// that init's output reaches the serial console.
func buildInitramfs(dst, initBin, modDir string) error {
	var buf bytes.Buffer
	w := &cpioWriter{w: &buf}
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules"} {
		w.dir(d)
	}
	w.node("dev/console", syscall.S_IFCHR|0o600, 5, 1)
	b, err := os.ReadFile(initBin)
	if err != nil {
		return fmt.Errorf("reading the guest init: %w", err)
	}
	w.file("init", 0o755, b)
	order, paths, err := loadOrder(modDir, modules)
	if err != nil {
		return fmt.Errorf("finding the guest's modules: %w", err)
	}
	for _, m := range order {
		b, err := os.ReadFile(paths[m])
		if err != nil {
			return err
		}
		w.file(strings.TrimPrefix(vminit.ModulesDir, "/")+"/"+m+".ko", 0o644, b)
	}
	w.file(strings.TrimPrefix(vminit.ModulesList, "/"), 0o644, []byte(strings.Join(order, "\n")+"\n"))
	w.trailer()
	return writeAtomic(dst, buf.Bytes())
}

// cpioWriter writes the "newc" cpio format the kernel unpacks.
type cpioWriter struct {
	w   io.Writer
	ino int
}

func (c *cpioWriter) header(name string, mode uint32, size int, major, minor uint32) {
	c.ino++
	nlink := 1
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		nlink = 2
	}
	fmt.Fprintf(c.w, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, major, minor, len(name)+1, 0)
	io.WriteString(c.w, name+"\x00")
	c.pad(110 + len(name) + 1)
}

func (c *cpioWriter) pad(n int) {
	if r := n % 4; r != 0 {
		c.w.Write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) dir(name string) { c.header(name, syscall.S_IFDIR|0o755, 0, 0, 0) }

func (c *cpioWriter) node(name string, mode, major, minor uint32) {
	c.header(name, mode, 0, major, minor)
}

func (c *cpioWriter) file(name string, perm uint32, data []byte) {
	c.header(name, syscall.S_IFREG|perm, len(data), 0, 0)
	c.w.Write(data)
	c.pad(len(data))
}

func (c *cpioWriter) trailer() { c.header("TRAILER!!!", 0, 0, 0, 0) }

func writeAtomic(dst string, b []byte) error {
	tmp := dst + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// run runs a host tool and puts its output in the error.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// mkfs makes an ext4 filesystem of size bytes in a new raw image file at
// dst holding what dir holds (none if dir is empty). No journal: the
// read-only images never change, and a sandbox's writable layer does not
// outlive its sandbox; no reserved blocks, so the sandbox gets all of its
// disk limit.
func mkfs(ctx context.Context, dst, dir string, size, inodes int64) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	args := []string{"-q", "-F", "-t", "ext4", "-O", "^has_journal", "-m", "0", "-E", "root_owner=0:0"}
	if inodes > 0 {
		args = append(args, "-N", strconv.FormatInt(inodes, 10))
	}
	if dir != "" {
		args = append(args, "-d", dir)
	}
	return run(ctx, "mkfs.ext4", append(args, dst)...)
}

// treeSize sums the sizes of the files under dir (in 4 KiB blocks, as
// ext4 stores them) and counts its entries.
func treeSize(dir string) (bytes, entries int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		entries++
		if d.Type().IsRegular() || d.Type()&fs.ModeSymlink != 0 {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			bytes += (fi.Size() + 4095) &^ 4095
		} else {
			bytes += 4096
		}
		return nil
	})
	return bytes, entries, err
}

// imageOf makes (once) a read-only ext4 image of tree dir at dst: the
// template's disk, or the files disk.
func imageOf(ctx context.Context, dst, dir string) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	size, entries, err := treeSize(dir)
	if err != nil {
		return fmt.Errorf("measuring %s: %w", dir, err)
	}
	// Room for ext4's own structures (inode tables, bitmaps,
	// directories) beside the data.
	size = size + size/8 + entries*512 + 16<<20
	size = (size + 1<<20 - 1) &^ (1<<20 - 1)
	tmp := dst + ".tmp-" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	if err := mkfs(ctx, tmp, dir, size, entries+entries/4+1024); err != nil {
		return fmt.Errorf("making a disk image of %s: %w", dir, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("making a disk image of %s: %w", dir, err)
	}
	return nil
}

// blankDisk makes (once) a qcow2 image of an empty ext4 filesystem of
// size bytes at dst: a sandbox's writable layer starts as a copy of it.
func blankDisk(ctx context.Context, qemuImg, dst string, size int64) error {
	if _, err := os.Stat(dst); err == nil {
		return nil
	}
	raw := dst + ".raw-" + strconv.Itoa(os.Getpid())
	defer os.Remove(raw)
	if err := mkfs(ctx, raw, "", size, 0); err != nil {
		return fmt.Errorf("making a blank disk: %w", err)
	}
	tmp := dst + ".tmp-" + strconv.Itoa(os.Getpid())
	defer os.Remove(tmp)
	if err := run(ctx, qemuImg, "convert", "-q", "-f", "raw", "-O", "qcow2", raw, tmp); err != nil {
		return fmt.Errorf("making a blank disk: %w", err)
	}
	return os.Rename(tmp, dst)
}

// filesKey names the files disk of files: their targets and what each
// source is now (a changed binary is a new disk).
func filesKey(files []sandbox.File) (string, error) {
	h := sha256.New()
	for _, f := range files {
		fi, err := os.Stat(f.Source)
		if err != nil {
			return "", fmt.Errorf("sandbox file %s: %w", f.Source, err)
		}
		if !fi.Mode().IsRegular() {
			return "", fmt.Errorf("sandbox file %s: not a regular file", f.Source)
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		var ino uint64
		if st != nil {
			ino = st.Ino
		}
		json.NewEncoder(h).Encode([]any{f.Source, f.Target, fi.Size(), fi.ModTime().UnixNano(), ino})
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// filesDisk makes at dst the read-only disk holding files, each named by
// its index (vminit.File.Name), staged in a directory under tmpDir.
func filesDisk(ctx context.Context, tmpDir, dst string, files []sandbox.File) error {
	stage, err := os.MkdirTemp(tmpDir, "files-stage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(stage)
	for i, f := range files {
		if err := copyFile(f.Source, filepath.Join(stage, strconv.Itoa(i))); err != nil {
			return fmt.Errorf("staging sandbox file %s: %w", f.Source, err)
		}
	}
	return imageOf(ctx, dst, stage)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// hashFiles hashes the contents of paths, in order.
func hashFiles(paths ...string) (string, error) {
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
		_, err = io.Copy(h, f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("hashing %s: %w", p, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// prune removes all but the keep newest files of dir matching pattern:
// images of templates, files and inits that have since changed. A VM
// still using one keeps it open; new ones use the newest.
func prune(dir, pattern string, keep int) error {
	m, err := filepath.Glob(filepath.Join(dir, pattern))
	if err != nil || len(m) <= keep {
		return err
	}
	type entry struct {
		path string
		mod  int64
	}
	var es []entry
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil {
			es = append(es, entry{p, fi.ModTime().UnixNano()})
		}
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Compare(b.mod, a.mod) })
	var errs []error
	for _, e := range es[min(keep, len(es)):] {
		if err := os.Remove(e.path); err != nil && !os.IsNotExist(err) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
