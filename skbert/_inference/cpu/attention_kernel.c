/* Attention of the tiled layers' blocks (skbert/_inference/cpu/attention.py calls it through
 * ctypes), for the families whose scores are plain scaled dot products (no added scores, no
 * rotation): softmax(Q K^T * scale) V per row and head. skbert/_inference/cpu/native.py
 * compiles it with the machine's C compiler (-O3 -march=native) the first time it is needed.
 *
 * Why not PyTorch's kernel: prediction blocks are short (a block of one length per group of
 * texts; the STS-B test sentences have 5 to 46 tokens, 12 at the median), and PyTorch's CPU
 * attention, written for long sequences, spends most of its time on short ones outside the
 * arithmetic. This one computes each (row, head) in one pass with its scores in registers or
 * L1: scores transposed (keys down, 16 queries across a vector), so the softmax's maximum and
 * sum are vertical vector operations, and the weighted sum of values reads each value row once
 * for 2 to 8 queries.
 *
 * Each (row, head) depends on that row's projections alone, always through the same
 * instructions for a given length and head size, so a text gets the same bits in every call
 * whichever texts share its block (the contract of skbert/_inference/predict.py).
 *
 * Vectors are GCC / Clang vector extensions of 16 floats (one AVX-512 register, two AVX2 ones,
 * four NEON ones): the compiler maps them to the machine's instructions.
 */
#include <float.h>
#include <stdint.h>
#include <string.h>

typedef float v16 __attribute__((vector_size(64)));
typedef int32_t i16 __attribute__((vector_size(64)));

/* The largest head size computed here (larger ones run PyTorch's kernel). */
#define MAX_HEAD 128
/* Keys whose scores are computed at once (independent accumulators). */
#define KEYS 8

static inline v16 load(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store(float *p, v16 v) { memcpy(p, &v, sizeof v); }

static inline v16 splat(float x) { return (v16){0} + x; }

static inline v16 maximum(v16 a, v16 b) {
    const i16 a_larger = a > b;
    return (v16)(((i16)a & a_larger) | ((i16)b & ~a_larger));
}

/* exp(x) for x <= 0 (scores minus their maximum), within 2 ulp: 2^n * exp(r) with
 * n = round(x / ln 2), r = x - n ln 2 (ln 2 in two parts) and Cephes' polynomial for exp(r);
 * below -87 (where exp is under float's smallest normal) clamped to -87. */
static inline v16 exp_nonpositive(v16 x) {
    x = maximum(x, splat(-87.f));
    const float round_magic = 12582912.f; /* 1.5 * 2^23: adding it rounds to an integer */
    const v16 shifted = x * 1.44269504088896341f + round_magic;
    const i16 n = (i16)shifted - (i16)splat(round_magic);
    const v16 nf = shifted - round_magic;
    v16 r = x - nf * 0.693359375f;
    r = r + nf * 2.12194440e-4f;
    v16 p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    return p * (v16)((n + 127) << 23);
}

static const float zero_row[MAX_HEAD];

/* One head of one row: queries and keys of token t at q, k + t * ld (size floats each), its
 * values at v + t * vld (16 * vectors floats, those past size zero); its output at
 * out + t * ldo. `vectors` and `group` (queries per pass over the values) are
 * constants where it is called, so each combination compiles to code of its own.
 * qt: size x 16 floats; st: length x 16 floats. */
static inline __attribute__((always_inline)) void head(
    const float *q, const float *k, const float *v, int64_t ld, int64_t vld, int64_t length,
    int64_t size, float scale, float *out, int64_t ldo, float *restrict qt, float *restrict st,
    const int vectors, const int group) {
    for (int64_t first = 0; first < length; first += 16) {
        const int64_t n = length - first < 16 ? length - first : 16;
        /* 16 queries (scaled) transposed: qt[d * 16 + a] = q[first + a][d] * scale */
        if (n < 16) memset(qt, 0, sizeof(float) * 16 * size);
        for (int64_t a = 0; a < n; a++) {
            const float *restrict row = q + (first + a) * ld;
            for (int64_t d = 0; d < size; d++) qt[d * 16 + a] = row[d] * scale;
        }
        /* scores, transposed: st[j * 16 + a] = q_a . k_j; and their maximum per query */
        v16 peak = splat(-FLT_MAX);
        for (int64_t j0 = 0; j0 < length; j0 += KEYS) {
            const float *key[KEYS];
            for (int b = 0; b < KEYS; b++) key[b] = j0 + b < length ? k + (j0 + b) * ld : zero_row;
            v16 sums[KEYS];
            for (int b = 0; b < KEYS; b++) sums[b] = splat(0.f);
            for (int64_t d = 0; d < size; d++) {
                const v16 queries = load(qt + d * 16);
                for (int b = 0; b < KEYS; b++) sums[b] += key[b][d] * queries;
            }
            for (int b = 0; b < KEYS && j0 + b < length; b++) {
                peak = maximum(peak, sums[b]);
                store(st + (j0 + b) * 16, sums[b]);
            }
        }
        /* softmax's numerators in place, and their sums */
        v16 total = splat(0.f);
        for (int64_t j = 0; j < length; j++) {
            const v16 p = exp_nonpositive(load(st + j * 16) - peak);
            total += p;
            store(st + j * 16, p);
        }
        float inverse[16];
        store(inverse, 1.f / total);
        /* outputs: the values weighted by the numerators, over their sum; `group` queries
         * per pass over the values */
        for (int64_t a0 = 0; a0 < n; a0 += group) {
            v16 o[8][MAX_HEAD / 16];
            for (int a = 0; a < group; a++)
                for (int c = 0; c < vectors; c++) o[a][c] = splat(0.f);
            for (int64_t j = 0; j < length; j++) {
                v16 value[MAX_HEAD / 16];
                for (int c = 0; c < vectors; c++) value[c] = load(v + j * vld + 16 * c);
                const float *weights = st + j * 16 + a0;
                for (int a = 0; a < group; a++)
                    for (int c = 0; c < vectors; c++) o[a][c] += weights[a] * value[c];
            }
            for (int a = 0; a < group && a0 + a < n; a++) {
                float row[MAX_HEAD];
                for (int c = 0; c < vectors; c++) store(row + 16 * c, o[a][c] * inverse[a0 + a]);
                memcpy(out + (first + a0 + a) * ldo, row, size * sizeof(float));
            }
        }
    }
}

/* Vectors of 16 floats per value row for heads of `size` (a power of two: 1, 2, 4 or 8). */
static int64_t value_vectors(int64_t size) {
    return size <= 16 ? 1 : size <= 32 ? 2 : size <= 64 ? 4 : 8;
}

/* Bytes of float32 scratch `attend` needs for blocks of `length` tokens and heads of `size`. */
int64_t attend_scratch(int64_t length, int64_t size) {
    const int64_t padded = 16 * value_vectors(size);
    return (16 * size + 16 * length + length * padded) * (int64_t)sizeof(float);
}

/* qkv: (rows, length, 3, heads, size) float32, contiguous (each token's queries, keys, values
 * of every head); out: (rows, length, heads, size) float32, contiguous. scratch: at least
 * attend_scratch(length, size) bytes. Returns 0, or -1 (nothing written) where size exceeds
 * MAX_HEAD. */
int attend(const float *qkv, int64_t rows, int64_t length, int64_t heads, int64_t size,
           float scale, float *out, float *scratch) {
    if (size < 1 || size > MAX_HEAD) return -1;
    const int64_t ld = 3 * heads * size, ldo = heads * size, vectors = value_vectors(size);
    const int64_t padded = 16 * vectors;
    float *qt = scratch, *st = scratch + 16 * size, *values = st + 16 * length;
    if (padded != size) memset(values, 0, sizeof(float) * length * padded);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t h = 0; h < heads; h++) {
            const float *q = qkv + r * length * ld + h * size, *k = q + heads * size;
            const float *v = q + 2 * heads * size;
            int64_t vld = ld;
            if (padded != size) { /* values copied into rows of whole vectors */
                for (int64_t j = 0; j < length; j++)
                    memcpy(values + j * padded, v + j * ld, size * sizeof(float));
                v = values;
                vld = padded;
            }
            float *o = out + r * length * ldo + h * size;
            if (vectors == 1)
                head(q, k, v, ld, vld, length, size, scale, o, ldo, qt, st, 1, 8);
            else if (vectors == 2)
                head(q, k, v, ld, vld, length, size, scale, o, ldo, qt, st, 2, 8);
            else if (vectors == 4)
                head(q, k, v, ld, vld, length, size, scale, o, ldo, qt, st, 4, 4);
            else
                head(q, k, v, ld, vld, length, size, scale, o, ldo, qt, st, 8, 2);
        }
    return 0;
}
