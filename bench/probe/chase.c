/*
 * A plain pointer chase written the way lmbench's lat_mem_rd measures memory latency: a chain of
 * pointers through a buffer, followed by an unrolled loop of dependent loads (p = *p), timed with
 * gettimeofday over many iterations; the result is nanoseconds per load.
 *
 * As in lat_mem_rd's random mode, the chain visits every cache line of the buffer once, in random
 * order (one random cycle, Sattolo's algorithm), so that prefetchers cannot help. Unlike the probe
 * it does not pin itself, bind its memory or ask for huge pages (unless -H is given), and it times
 * on the wall clock: it is the baseline the probe is compared against in bench/probe-vs-peers.
 *
 * Usage: chase [-H] SIZE_MB [REPEATS]   (prints one ns-per-load figure per repeat, then the median)
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

#define LINE 64
#define FIVE(x) x x x x x
#define TWENTYFIVE(x) FIVE(FIVE(x))
#define HUNDRED(x) TWENTYFIVE(x) TWENTYFIVE(x) TWENTYFIVE(x) TWENTYFIVE(x)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static double now(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int huge = 0, arg = 1;
    if (argc > 1 && strcmp(argv[1], "-H") == 0) {
        huge = 1;
        arg++;
    }
    if (argc <= arg) {
        fprintf(stderr, "usage: chase [-H] SIZE_MB [REPEATS]\n");
        return 2;
    }
    size_t bytes = (size_t)atol(argv[arg]) << 20;
    int repeats = argc > arg + 1 ? atoi(argv[arg + 1]) : 7;
    if (repeats < 1 || repeats > 99) repeats = 7;
    size_t lines = bytes / LINE;
    /* 2 MiB aligned, so that -H can back the whole buffer with huge pages. */
    char *buf = aligned_alloc(2 << 20, (bytes + (2 << 20) - 1) & ~(size_t)((2 << 20) - 1));
    uint32_t *perm = malloc(lines * sizeof *perm);
    if (!buf || !perm || lines < 2) {
        fprintf(stderr, "chase: cannot allocate %zu bytes\n", bytes);
        return 1;
    }
    if (huge) madvise(buf, bytes, MADV_HUGEPAGE);
    memset(buf, 1, bytes);
    for (size_t i = 0; i < lines; i++) perm[i] = (uint32_t)i;
    for (size_t i = lines - 1; i > 0; i--) { /* Sattolo: one cycle through every line */
        size_t j = next() % i;
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < lines; i++) *(char **)(buf + i * LINE) = buf + (size_t)perm[i] * LINE;
    free(perm);

    char **p = (char **)buf;
    /* Warm up, and size the iteration count to about 0.3 s per repeat. */
    size_t iters = 1000;
    for (;;) {
        double t0 = now();
        for (size_t i = 0; i < iters; i++) { HUNDRED(p = (char **)*p;) }
        double dt = now() - t0;
        if (dt > 0.1) {
            iters = (size_t)(iters * 0.3 / dt) + 1;
            break;
        }
        iters *= 2;
    }
    double ns[100];
    for (int r = 0; r < repeats; r++) {
        double t0 = now();
        for (size_t i = 0; i < iters; i++) { HUNDRED(p = (char **)*p;) }
        double dt = now() - t0;
        ns[r] = dt * 1e9 / (iters * 100.0);
        printf("run %d: %.1f ns per load\n", r + 1, ns[r]);
    }
    qsort(ns, repeats, sizeof ns[0], cmp);
    printf("median: %.1f ns per load (%zu MiB, %s pages)%s\n", ns[repeats / 2], bytes >> 20,
           huge ? "huge" : "base", p == NULL ? "!" : "");
    return 0;
}
