package qemu

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/lizard-build/lizard/internal/sandbox/qemu/vminit"
)

// pickAccel settles the accelerator: the one asked for, or with AccelAuto
// KVM if a tiny VM reaches its init with it within timeout, else TCG. The
// log says which and why: a /dev/kvm that exists may still not run a stock
// kernel (nested KVM without the guest support it needs, such as PVM).
func (r *Runtime) pickAccel(ctx context.Context, timeout time.Duration) error {
	switch r.accel {
	case AccelKVM, AccelTCG:
		r.log.Info("accelerator chosen by configuration", "accel", r.accel)
		return nil
	case "", AccelAuto:
	default:
		return fmt.Errorf("qemu: accelerator %q: want auto, kvm or tcg", r.accel)
	}
	if timeout <= 0 {
		timeout = DefaultProbeTimeout
	}
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err != nil {
		r.accel = AccelTCG
		r.log.Warn("using software emulation (TCG): /dev/kvm cannot be opened; sandboxes boot and run many times slower", "err", err)
		return nil
	} else {
		f.Close()
	}
	begin := time.Now()
	err := r.probe(ctx, timeout)
	if err != nil {
		r.accel = AccelTCG
		r.log.Warn("using software emulation (TCG): a probe VM did not reach its init with KVM; sandboxes boot and run many times slower (--qemu-accel kvm forces KVM)", "err", err, "took", time.Since(begin))
		return nil
	}
	r.accel = AccelKVM
	r.log.Info("using KVM: a probe VM reached its init", "took", time.Since(begin))
	return nil
}

// probe boots the guest kernel and init with KVM and no devices; the init
// prints vminit.ProbeMarker and reboots when the command line says so.
func (r *Runtime) probe(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, r.qemu, "-machine", "q35,accel=kvm", "-cpu", "host", "-m", "256M",
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-kernel", r.kernel, "-initrd", r.initramfs,
		"-append", "console=ttyS0 quiet panic=-1 reboot=t "+vminit.ProbeArg, "-serial", "stdio")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if strings.Contains(out.String(), vminit.ProbeMarker) {
		return nil
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("no answer in %s", timeout)
	}
	s := strings.TrimSpace(out.String())
	if len(s) > 300 {
		s = s[len(s)-300:]
	}
	return fmt.Errorf("%v: %s", err, s)
}
