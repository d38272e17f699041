/* The native half of the kernel's "share" request (kernel.py, share_heap;
 * docs/kernel-protocol.md): long share(struct args *a).
 *
 * It writes every region to the dump (all-zero pages left as holes),
 * creates the ready marker, waits for the map file to appear (polling every
 * millisecond, at most timeout_ms), then maps each region back over itself
 * MAP_PRIVATE|MAP_FIXED from that file at its offset. The caller holds the
 * GIL throughout (ctypes.PYFUNCTYPE), and no other thread of the process runs
 * Python, so nothing writes a region between its dump and its mapping: such
 * a write would be lost, the mapping bringing back the page as dumped. This
 * code itself writes only its stack (never a region) until every region is
 * mapped; the results go into *a last.
 *
 * Raw system calls, no libc, no data or relocations: kernel.py runs the
 * .text of this file from an executable page of its own (HEAPSHARE_AMD64,
 * which TestHeapShareCode checks against this source and regenerates with
 * `go test ./internal/pykernel -run TestHeapShareCode -update`).
 *
 * Returns 0, or -(stage << 12 | errno): stage 1 writing the dump, 2 the
 * marker, 3 waiting for the map file (ETIMEDOUT: it did not appear), 4 the
 * map file shorter than the dump, 5 mapping a region (a->mapped regions
 * were mapped before it, each with the content it had). Before stage 5
 * nothing is mapped: the heap is as it was. */

struct op { unsigned long addr, len, off; };

struct args {
  const struct op *ops;
  long n;         /* regions, at most MAXOPS */
  long dumpfd;    /* open for writing, as long as the regions together */
  const char *ready, *map;
  long timeout_ms;
  unsigned long stored, mapped; /* out: bytes written, regions mapped */
};

#define MAXOPS 4096

static inline __attribute__((always_inline)) long sys6(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 asm("r10") = d, r8 asm("r8") = e, r9 asm("r9") = f;
  asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
  return ret;
}

static inline __attribute__((always_inline)) long fail(long stage, long e) { return -((stage << 12) | -e); }

static inline __attribute__((always_inline)) int zero(const unsigned long *p) {
  unsigned long x = 0;
  for (int i = 0; i < 512; i++) x |= p[i];
  return x == 0;
}

static inline __attribute__((always_inline)) long put(long fd, unsigned long addr, unsigned long len, unsigned long off) {
  unsigned long done = 0;
  while (done < len) {
    long w = sys6(18 /* pwrite64 */, fd, addr + done, len - done, off + done, 0, 0);
    if (w == -4 /* EINTR */) continue;
    if (w <= 0) return w < 0 ? w : -5 /* EIO */;
    done += w;
  }
  return 0;
}

static inline __attribute__((always_inline)) long millis(void) {
  long ts[2];
  sys6(228 /* clock_gettime */, 1 /* CLOCK_MONOTONIC */, (long)ts, 0, 0, 0, 0);
  return ts[0] * 1000 + ts[1] / 1000000;
}

static inline __attribute__((always_inline)) long run(struct args *a) {
  const struct op *ops = a->ops;
  long n = a->n, dumpfd = a->dumpfd, timeout = a->timeout_ms;
  const char *ready = a->ready, *map = a->map;
  unsigned long stored = 0, total = 0;
  /* A region freed since kernel.py listed it (an arena emptied meanwhile)
   * is left out: msync fails with ENOMEM on a range not wholly mapped. */
  unsigned long skip[MAXOPS / 64];
  if (n > MAXOPS) return fail(1, -7 /* E2BIG */);
  for (long i = 0; i < MAXOPS / 64; i++) skip[i] = 0;
  for (long i = 0; i < n; i++) {
    unsigned long a0 = ops[i].addr, end = a0 + ops[i].len, p, run = 0;
    if (ops[i].off + ops[i].len > total) total = ops[i].off + ops[i].len;
    if (sys6(26 /* msync */, a0, ops[i].len, 1 /* MS_ASYNC */, 0, 0, 0) != 0) {
      skip[i / 64] |= 1UL << (i % 64);
      continue;
    }
    for (p = a0; p < end; p += 4096) {
      if (!zero((const unsigned long *)p)) {
        if (!run) run = p;
        continue;
      }
      if (run) {
        long e = put(dumpfd, run, p - run, ops[i].off + (run - a0));
        if (e) return fail(1, e);
        stored += p - run;
        run = 0;
      }
    }
    if (run) {
      long e = put(dumpfd, run, end - run, ops[i].off + (run - a0));
      if (e) return fail(1, e);
      stored += end - run;
    }
  }
  long fd = sys6(257 /* openat */, -100 /* AT_FDCWD */, (long)ready, 01 | 0100 | 02000000 /* O_WRONLY|O_CREAT|O_CLOEXEC */, 0600, 0, 0);
  if (fd < 0) return fail(2, fd);
  sys6(3 /* close */, fd, 0, 0, 0, 0, 0);
  long start = millis();
  for (;;) {
    fd = sys6(257, -100, (long)map, 02000000 /* O_RDONLY|O_CLOEXEC */, 0, 0, 0);
    if (fd >= 0) break;
    if (fd != -2 /* ENOENT */) return fail(3, fd);
    if (millis() - start >= timeout) return fail(3, -110 /* ETIMEDOUT */);
    long ts[2];
    ts[0] = 0;
    ts[1] = 1000000;
    sys6(35 /* nanosleep */, (long)ts, 0, 0, 0, 0, 0);
  }
  /* A file shorter than the regions would fault (SIGBUS) past its end. */
  unsigned long st[18]; /* struct stat: st_size at byte 48 */
  long e = sys6(5 /* fstat */, fd, (long)st, 0, 0, 0, 0);
  if (e || st[6] < total) {
    sys6(3, fd, 0, 0, 0, 0, 0);
    return fail(4, e ? e : -22 /* EINVAL */);
  }
  unsigned long mapped = 0;
  for (long i = 0; i < n; i++) {
    if (skip[i / 64] & (1UL << (i % 64))) continue;
    long m = sys6(9 /* mmap */, ops[i].addr, ops[i].len, 3 /* PROT_READ|PROT_WRITE */, 0x12 /* MAP_PRIVATE|MAP_FIXED */, fd, ops[i].off);
    if (m != (long)ops[i].addr) {
      sys6(3, fd, 0, 0, 0, 0, 0);
      a->mapped = mapped;
      return fail(5, m);
    }
    mapped++;
  }
  sys6(3, fd, 0, 0, 0, 0, 0);
  a->stored = stored;
  a->mapped = mapped; /* the regions left out are not counted */
  return 0;
}

/* share is the first function of .text: kernel.py calls the page's start. */
long share(struct args *a) {
  /* Every signal held off meanwhile (SIGKILL and SIGSTOP cannot be):
   * Python's C handler would write its flags into a region. What comes is
   * delivered once the mask is restored. */
  unsigned long all = ~0UL, old = 0;
  sys6(14 /* rt_sigprocmask */, 2 /* SIG_SETMASK */, (long)&all, (long)&old, 8, 0, 0);
  long rc = run(a);
  sys6(14, 2, (long)&old, 0, 8, 0, 0);
  return rc;
}
