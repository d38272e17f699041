/* long share(const struct op *ops, long n, long fd): for each op, write the
 * region [addr, addr+len) to fd at off, all-zero pages left as holes, then
 * map fd's [off, off+len) over it MAP_PRIVATE|MAP_FIXED. No libc: it runs
 * from an executable page of its own while the regions it replaces are live,
 * and nothing else of the process runs between a region's write and its map
 * (the caller holds the GIL). */
struct op { unsigned long addr, len, off; };
static inline long sys6(long n, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 asm("r10") = d, r8 asm("r8") = e, r9 asm("r9") = f;
  asm volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9) : "rcx", "r11", "memory");
  return ret;
}
static int zero(const unsigned long *p) {
  for (int i = 0; i < 512; i++) if (p[i]) return 0;
  return 1;
}
static long put(long fd, unsigned long addr, unsigned long len, unsigned long off) {
  unsigned long done = 0;
  while (done < len) {
    long w = sys6(18 /*pwrite64*/, fd, addr + done, len - done, off + done, 0, 0);
    if (w == -4) continue; /* EINTR */
    if (w <= 0) return w < 0 ? w : -5;
    done += w;
  }
  return 0;
}
long share(const struct op *ops, long n, long fd) {
  for (long i = 0; i < n; i++) {
    unsigned long a = ops[i].addr, end = a + ops[i].len, run = 0;
    for (; a < end; a += 4096) {
      if (!zero((const unsigned long *)a)) { if (!run) run = a; continue; }
      if (run) { long e = put(fd, run, a - run, ops[i].off + (run - ops[i].addr)); if (e) return -(i + 1) * 4096 + e; run = 0; }
    }
    if (run) { long e = put(fd, run, end - run, ops[i].off + (run - ops[i].addr)); if (e) return -(i + 1) * 4096 + e; }
    long m = sys6(9 /*mmap*/, ops[i].addr, ops[i].len, 3 /*PROT_READ|PROT_WRITE*/, 0x12 /*MAP_PRIVATE|MAP_FIXED*/, fd, ops[i].off);
    if (m != (long)ops[i].addr) return -(i + 1) * 4096 + m;
  }
  return 0;
}
