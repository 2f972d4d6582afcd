/* Harness of scripts/arm-mca.sh's K-quant rows (run under qemu-aarch64 with its execution trace
 * on; never timed): `harness FORMAT BLOCKS ROWS` calls llama.cpp's ggml_vec_dot_<fmt>_q8_K once
 * per row over ROWS rows of BLOCKS super-blocks of filler bytes; `harness FORMAT BLOCKS ROWS 2`
 * calls it with nrc = 2 (two rows × two tokens a call: its int8 matrix-multiply path, where the
 * object was built with i8mm and the format has one) once per pair of rows. Linked static, not
 * PIE: the trace's addresses are the symbols'. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* quants.c refers to these; the K-quant dot products never reach them. */
const float ggml_table_f32_ue4m3[256];
void quantize_row_q8_K_ref(const float *x, void *y, int64_t k) { (void)x; (void)y; (void)k; abort(); }

typedef void (*dot_fn)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
#define DECL(f) void f(int, float *, size_t, const void *, size_t, const void *, size_t, int);
DECL(ggml_vec_dot_q2_K_q8_K)
DECL(ggml_vec_dot_q3_K_q8_K)
DECL(ggml_vec_dot_q4_K_q8_K)
DECL(ggml_vec_dot_q5_K_q8_K)
DECL(ggml_vec_dot_q6_K_q8_K)

int main(int argc, char **argv) {
    static const struct { const char *name; dot_fn f; size_t bytes; } fmts[] = {
        {"Q2_K", ggml_vec_dot_q2_K_q8_K, 84},  {"Q3_K", ggml_vec_dot_q3_K_q8_K, 110},
        {"Q4_K", ggml_vec_dot_q4_K_q8_K, 144}, {"Q5_K", ggml_vec_dot_q5_K_q8_K, 176},
        {"Q6_K", ggml_vec_dot_q6_K_q8_K, 210},
    };
    if (argc != 4 && !(argc == 5 && !strcmp(argv[4], "2"))) {
        fprintf(stderr, "usage: harness FORMAT BLOCKS ROWS [2]\n");
        return 2;
    }
    int pairs = argc == 5;
    int k = -1;
    for (int i = 0; i < 5; i++) if (!strcmp(argv[1], fmts[i].name)) k = i;
    if (k < 0) { fprintf(stderr, "unknown format %s\n", argv[1]); return 2; }
    int blocks = atoi(argv[2]), rows = atoi(argv[3]);
    size_t wb = (size_t)blocks * fmts[k].bytes, yb = (size_t)blocks * 292;
    uint8_t *w = malloc(wb * rows), *y = malloc(yb * 2);
    uint32_t s = 1;
    for (size_t i = 0; i < wb * rows; i++) { s = s * 1103515245u + 12345u; w[i] = (s >> 16) & 0x3b; }
    for (size_t i = 0; i < yb * 2; i++) { s = s * 1103515245u + 12345u; y[i] = (s >> 16) & 0x3b; }
    float sum = 0, out[4];
    if (pairs) {
        /* Rows r, r + 1 × tokens 0, 1: out[0..2] row r's, out[2..4] row r + 1's. */
        for (int r = 0; r + 1 < rows; r += 2) {
            fmts[k].f(blocks * 256, out, 2, w + r * wb, wb, y, yb, 2);
            sum += out[0] + out[1] + out[2] + out[3];
        }
    } else {
        for (int r = 0; r < rows; r++) {
            fmts[k].f(blocks * 256, out, 0, w + r * wb, 0, y, 0, 1);
            sum += out[0];
        }
    }
    printf("sum %g\n", sum);
    return 0;
}
