/* The integer dot-product rate of one core, for reading BENCHMARKS.md: how many AVX-512 VNNI
 * `vpdpbusd` (64 u8×s8 products each) the core retires per second with 12 independent accumulators
 * held in registers (no latency limit), and how many 1-bit steps (a 64-bit mask expanded to 0/1
 * bytes by a masked move, then one `vpdpbusd`: what a Q1_0 kernel does per 64 weights at one token).
 * Check the assembly (`-S`) keeps the accumulators in zmm registers when changing it.
 *
 * With OpenMP every thread runs the same loops at once and the total is printed too: the machine's
 * ceiling for the kernels' threads (on this project's 2-vCPU hosts, two threads retire twice one's
 * rate).
 *
 *   gcc -O2 -fopenmp -mavx512f -mavx512bw -mavx512vnni scripts/vnni_peak.c -o /tmp/vnni_peak
 *   OMP_NUM_THREADS=2 /tmp/vnni_peak
 */
#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#define TWELVE(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

/* One thread's rates: `vpdpbusd` and 1-bit steps per second. */
static void measure(double *dot_rate, double *step_rate) {
    const long n = 100000000;
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(5), one = _mm512_set1_epi8(1);
    /* Opaque to the compiler: with known operands it would fold the products into one add. */
    __asm__ volatile("" : "+v"(u), "+v"(s), "+v"(one));
#define DECL(k) __m512i a##k = _mm512_set1_epi32(k);
    TWELVE(DECL)

    double t0 = now();
    for (long i = 0; i < n; i++) {
#define DOT(k) a##k = _mm512_dpbusd_epi32(a##k, u, s);
        TWELVE(DOT)
    }
    double dot = 12.0 * n / (now() - t0);

    __mmask64 m = 0x5555aaaa3333ccccull;
    t0 = now();
    for (long i = 0; i < n; i++) {
        m = (m << 1) | (m >> 63); /* a new mask each step, as from memory */
#define STEP(k) a##k = _mm512_dpbusd_epi32(a##k, _mm512_maskz_mov_epi8(m ^ (k * 0x0101010101010101ull), one), s);
        TWELVE(STEP)
    }
    double step = 12.0 * n / (now() - t0);

    __m512i sum = _mm512_setzero_si512();
#define ADD(k) sum = _mm512_add_epi32(sum, a##k);
    TWELVE(ADD)
    if (_mm512_reduce_add_epi32(sum) == 42) /* keeps the accumulators live */
        printf("(checksum)\n");
    *dot_rate = dot;
    *step_rate = step;
}

int main(void) {
    double dot = 0, step = 0, dot_one = 0, step_one = 0;
    int threads = 1;
#pragma omp parallel reduction(+ : dot, step)
    {
        double d, s;
        measure(&d, &s);
        dot += d;
        step += s;
#pragma omp master
        {
            threads = omp_get_num_threads();
            dot_one = d;
            step_one = s;
        }
    }
    printf("vpdpbusd: %.2f G/s = %.0f G int8 products/s per thread\n", dot_one / 1e9, 64 * dot_one / 1e9);
    printf("1-bit step (mask expand + vpdpbusd): %.2f G/s = %.0f G products/s per thread\n",
           step_one / 1e9, 64 * step_one / 1e9);
    printf("all %d threads at once: vpdpbusd %.2f G/s (%.0f G products/s), 1-bit steps %.2f G/s (%.0f G products/s)\n",
           threads, dot / 1e9, 64 * dot / 1e9, step / 1e9, 64 * step / 1e9);
    return 0;
}
