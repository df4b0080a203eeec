/*
 * frame-copy-floor.c — what fm's frame path costs in C, by placement.
 *
 * Two processes ping-pong SIZE-byte messages; each direction has its own
 * ring of NFRAMES frames in shared memory (as fm's shmem device: the sender
 * copies into the next frame, publishes, the receiver copies out). Prints
 * the one-way latency and, per side, the mean time of the copy into a
 * frame and the copy out of one. MODE picks the copy into the frame:
 *   0 memcpy; 1 prefetch-for-write of every line, then memcpy;
 *   2 non-temporal stores (SSE2 streaming stores, then sfence).
 *
 * Build: cc -O2 -o frame-copy-floor scripts/frame-copy-floor.c
 * Usage: frame-copy-floor SIZE NFRAMES ITERS [MODE]   (CPUs 0 and 1)
 * Take `shm_baseline line-proc 0 1 100` before and after: the placement
 * moves on some hosts (docs/PERFORMANCE.md, "Far placement").
 */
#define _GNU_SOURCE
#include <emmintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int mode;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void pin(int cpu)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    sched_setaffinity(0, sizeof s, &s);
}

static void copy_in(char *d, const char *s, size_t n)
{
    if (mode == 1) {
        for (size_t o = 0; o < n; o += 64)
            __builtin_prefetch(d + o, 1, 3);
        memcpy(d, s, n);
    } else if (mode == 2) {
        for (size_t o = 0; o + 64 <= n; o += 64)
            for (int k = 0; k < 64; k += 16)
                _mm_stream_si128((__m128i *)(d + o + k), _mm_load_si128((const __m128i *)(s + o + k)));
        _mm_sfence();
    } else {
        memcpy(d, s, n);
    }
}

struct flag {
    _Alignas(64) _Atomic uint64_t seq;
    char pad[56];
};

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s SIZE NFRAMES ITERS [MODE]\n", argv[0]);
        return 2;
    }
    size_t n = strtoul(argv[1], 0, 10);
    int nf = atoi(argv[2]), iters = atoi(argv[3]);
    mode = argc > 4 ? atoi(argv[4]) : 0;
    if (n < 64 || nf < 1 || iters < 10) {
        fprintf(stderr, "SIZE >= 64, NFRAMES >= 1, ITERS >= 10\n");
        return 2;
    }
    size_t fsz = (n + 4095) & ~(size_t)4095;
    size_t len = 2 * sizeof(struct flag) + 2 * (size_t)nf * fsz + 4 * sizeof(double);
    char *m = mmap(0, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    struct flag *flag = (struct flag *)m;
    char *ring[2] = {m + 2 * sizeof(struct flag), m + 2 * sizeof(struct flag) + (size_t)nf * fsz};
    double *theirs = (double *)(ring[1] + (size_t)nf * fsz);
    memset(ring[0], 1, 2 * (size_t)nf * fsz);
    pid_t pid = fork();
    int me = pid == 0;
    pin(me);
    char *buf = aligned_alloc(4096, fsz);
    memset(buf, me + 5, n);
    double in = 0, out = 0, t0 = 0;
    int warm = iters / 10;
    for (int i = 0; i < iters; i++) {
        if (i == warm) {
            t0 = now_ns();
            in = out = 0;
        }
        for (int step = 0; step < 2; step++) {
            if ((step == 0) == !me) { /* send on my ring */
                char *f = ring[me] + (size_t)(i % nf) * fsz;
                double a = now_ns();
                copy_in(f, buf, n);
                in += now_ns() - a;
                atomic_store_explicit(&flag[me].seq, i + 1, memory_order_release);
            } else { /* receive on the other's ring */
                while (atomic_load_explicit(&flag[!me].seq, memory_order_acquire) != (uint64_t)i + 1)
                    ;
                char *f = ring[!me] + (size_t)(i % nf) * fsz;
                double a = now_ns();
                memcpy(buf, f, n);
                out += now_ns() - a;
            }
        }
    }
    double elapsed = now_ns() - t0;
    int k = iters - warm;
    if (me) {
        theirs[0] = in / k;
        theirs[1] = out / k;
        _exit(0);
    }
    waitpid(pid, 0, 0);
    printf("mode %d size %zu frames %d one-way %.2f us | copy in %.2f/%.2f us, copy out %.2f/%.2f us (rank 0/1)\n",
           mode, n, nf, elapsed / k / 2 / 1e3, in / k / 1e3, theirs[0] / 1e3, out / k / 1e3, theirs[1] / 1e3);
    return 0;
}
