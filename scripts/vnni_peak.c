/* The integer dot-product ceiling of one core, for reading BENCHMARKS.md: how many AVX-512 VNNI
 * `vpdpbusd` (64 u8×s8 products each) the core retires per second with 12 independent accumulators
 * (no latency limit), and how many 1-bit steps (a 64-bit mask expanded to 0/1 bytes by a masked move,
 * then one `vpdpbusd`: what a Q1_0 kernel does per 64 weights at one token).
 *
 *   gcc -O2 -mavx512f -mavx512bw -mavx512vnni scripts/vnni_peak.c -o /tmp/vnni_peak && /tmp/vnni_peak
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    const long n = 50000000;
    __m512i acc[12];
    for (int k = 0; k < 12; k++) acc[k] = _mm512_set1_epi32(k);
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(5), one = _mm512_set1_epi8(1);

    double t0 = now();
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < 12; k++) acc[k] = _mm512_dpbusd_epi32(acc[k], u, s);
        __asm__ volatile("" : "+v"(u));
    }
    double dot = 12.0 * n / (now() - t0);

    t0 = now();
    for (long i = 0; i < n; i++) {
        for (int k = 0; k < 12; k++) {
            __m512i bits = _mm512_maskz_mov_epi8((__mmask64)(i * 0x9e3779b97f4a7c15ull + k), one);
            acc[k] = _mm512_dpbusd_epi32(acc[k], bits, s);
        }
    }
    double step = 12.0 * n / (now() - t0);

    int sum = 0;
    for (int k = 0; k < 12; k++) sum += _mm512_reduce_add_epi32(acc[k]);
    printf("vpdpbusd: %.2f G/s = %.0f G int8 products/s per core\n", dot / 1e9, 64 * dot / 1e9);
    printf("1-bit step (mask expand + vpdpbusd): %.2f G/s = %.0f G products/s per core\n", step / 1e9,
           64 * step / 1e9);
    printf("(checksum %d)\n", sum); /* keeps the accumulators live */
    return 0;
}
