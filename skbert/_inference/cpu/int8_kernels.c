/* The steps around skbert's int8 matrix products, fused: each reads its input once and writes
 * its output once (skbert/_inference/cpu/fused_int8.py calls them through ctypes; the product
 * itself is torch._int_mm). skbert/_inference/cpu/native.py compiles this file with the
 * machine's C compiler (-O3 -march=native -ffp-contract=off) the first time int8 runs.
 *
 * Every function works row by row: a row's results depend on that row of the input alone, so a
 * text gets the same bits in every call (the contract of skbert/_inference/predict.py). The
 * reductions are a row's largest and smallest values, exact in any order, and the layer norm's
 * sums, in one fixed order (row_sum); every other step is elementwise, with no fused multiply-add but the explicit fmaf of the GELU
 * polynomial, so the vectorised loop and its scalar remainder give the same bits for an element.
 *
 * Arrays are row-major float32 (int8 / int32 where named); `ld*` is a row's stride in elements.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

/* erf(x) for float32 as x * P(x^2) / Q(x^2) on [-4, 4] (1 outside, in float32): the rational
 * approximation of Eigen's and XLA's float erf, within 2e-7 of erf. */
static inline float erf_rational(float a) {
    float x = a > 4.f ? 4.f : (a < -4.f ? -4.f : a);
    float x2 = x * x;
    float p = -2.72614225801306e-10f;
    p = fmaf(p, x2, 2.77068142495902e-08f);
    p = fmaf(p, x2, -2.10102402082508e-06f);
    p = fmaf(p, x2, -5.69250639462346e-05f);
    p = fmaf(p, x2, -7.34990630326855e-04f);
    p = fmaf(p, x2, -2.95459980854025e-03f);
    p = fmaf(p, x2, -1.60960333262415e-02f);
    float q = -1.45660718464996e-05f;
    q = fmaf(q, x2, -2.13374055278905e-04f);
    q = fmaf(q, x2, -1.68282697438203e-03f);
    q = fmaf(q, x2, -7.37332916720468e-03f);
    q = fmaf(q, x2, -1.42647390514189e-02f);
    return x * p / q;
}

/* Exact GELU, x * Phi(x), with the erf above. */
static inline float gelu(float v) {
    return 0.5f * v * (1.f + erf_rational(v * 0.70710678118654752f));
}

/* Each row of x (rows x cols, stride ldx), times recip (per column; NULL: none), quantised to
 * int8 by its own largest magnitude: scales[r] = peak / 127, q = round(x / scales[r]). */
void quantise_symmetric(const float *x, int64_t rows, int64_t cols, int64_t ldx,
                        const float *recip, int8_t *q, float *scales) {
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict row = x + r * ldx;
        int8_t *restrict out = q + r * cols;
        float peak = 0.f;
        if (recip) {
            for (int64_t c = 0; c < cols; c++) {
                float v = fabsf(row[c] * recip[c]);
                peak = v > peak ? v : peak;
            }
        } else {
            for (int64_t c = 0; c < cols; c++) {
                float v = fabsf(row[c]);
                peak = v > peak ? v : peak;
            }
        }
        float scale = (peak > FLT_MIN ? peak : FLT_MIN) / 127.f;
        scales[r] = scale;
        if (recip) {
            for (int64_t c = 0; c < cols; c++)
                out[c] = (int8_t)nearbyintf(row[c] * recip[c] / scale);
        } else {
            for (int64_t c = 0; c < cols; c++)
                out[c] = (int8_t)nearbyintf(row[c] / scale);
        }
    }
}

/* One row quantised over its own range [min(low, 0), max(high, 0)] in 255 steps:
 * x ~ scale * (q - zero_point), q in [-128, 127]. */
static inline void asymmetric_row(const float *restrict row, int64_t cols, float low,
                                  float high, int8_t *restrict out, float *scale_out,
                                  int32_t *zero_point_out) {
    float scale = (high - low) / 255.f;
    scale = scale > FLT_MIN ? scale : FLT_MIN;
    float zero_point = -nearbyintf(low / scale) - 128.f;
    *scale_out = scale;
    *zero_point_out = (int32_t)zero_point;
    for (int64_t c = 0; c < cols; c++) {
        float v = nearbyintf(row[c] / scale) + zero_point;
        v = v < -128.f ? -128.f : (v > 127.f ? 127.f : v);
        out[c] = (int8_t)v;
    }
}

/* Each row of x quantised asymmetrically (asymmetric_row). */
void quantise_asymmetric(const float *x, int64_t rows, int64_t cols, int64_t ldx, int8_t *q,
                         float *scales, int32_t *zero_points) {
    for (int64_t r = 0; r < rows; r++) {
        const float *restrict row = x + r * ldx;
        float low = 0.f, high = 0.f;
        for (int64_t c = 0; c < cols; c++) {
            float v = row[c];
            low = v < low ? v : low;
            high = v > high ? v : high;
        }
        asymmetric_row(row, cols, low, high, q + r * cols, scales + r, zero_points + r);
    }
}

/* One row of int32 sums scaled back, (s - z * wsums) * (wscale * rs) + bias, then GELU
 * (after == 1) or plus the residual row (after == 2). `asymmetric` and `after` are constants
 * where it is called, so each combination compiles to a loop of its own. */
static inline __attribute__((always_inline)) void scale_back_row(
    const int32_t *restrict s, int64_t cols, const float *restrict wscale, float rs,
    const float *restrict bias, int asymmetric, int32_t z, const int32_t *restrict wsums,
    int after, const float *restrict res, float *restrict o) {
    for (int64_t c = 0; c < cols; c++) {
        const int32_t sum = asymmetric ? s[c] - z * wsums[c] : s[c];
        const float v = (float)sum * (wscale[c] * rs) + bias[c];
        o[c] = after == 1 ? gelu(v) : (after == 2 ? v + res[c] : v);
    }
}

/* The sum of a row's values in a fixed order: 16 running sums (one vector), then those in
 * turn; the same for the row wherever it is. */
static inline float row_sum(const float *restrict v, int64_t cols) {
    float part[16] = {0};
    int64_t c = 0;
    for (; c + 16 <= cols; c += 16)
        for (int k = 0; k < 16; k++) part[k] += v[c + k];
    for (int k = 0; c < cols; c++, k++) part[k] += v[c];
    float total = 0.f;
    for (int k = 0; k < 16; k++) total += part[k];
    return total;
}

/* A row's layer norm in place: (v - mean) / sqrt(variance + eps) * weight + bias (bias NULL:
 * none), the variance over the values' distances to the mean. */
static inline void norm_row(float *restrict v, int64_t cols, const float *restrict weight,
                            const float *restrict bias, float eps, float *restrict scratch) {
    const float mean = row_sum(v, cols) / (float)cols;
    for (int64_t c = 0; c < cols; c++) {
        const float d = v[c] - mean;
        scratch[c] = d * d;
    }
    const float inverse = 1.f / sqrtf(row_sum(scratch, cols) / (float)cols + eps);
    if (bias)
        for (int64_t c = 0; c < cols; c++) v[c] = (v[c] - mean) * inverse * weight[c] + bias[c];
    else
        for (int64_t c = 0; c < cols; c++) v[c] = (v[c] - mean) * inverse * weight[c];
}

/* A row's scaled sums plus its float channels' product, in place: o += tail_row @ tail_weight
 * (ntail x cols), one channel after the other; then GELU (after == 1) or plus the residual row
 * (after == 2). */
static inline void add_float_channels(float *restrict o, int64_t cols,
                                      const float *restrict tail_row, int64_t ntail,
                                      const float *restrict tail_weight, int after,
                                      const float *restrict res) {
    for (int64_t t = 0; t < ntail; t++) {
        const float a = tail_row[t];
        const float *restrict w = tail_weight + t * cols;
        for (int64_t c = 0; c < cols; c++) o[c] += a * w[c];
    }
    if (after == 1)
        for (int64_t c = 0; c < cols; c++) o[c] = gelu(o[c]);
    else if (after == 2)
        for (int64_t c = 0; c < cols; c++) o[c] += res[c];
}

/* out = (sums - zero_points * wsums) * wscale * rscale + bias, plus (ntail > 0) the float
 * channels' product tail_in @ tail_weight (tail_in rows x ntail with row stride ldtail,
 * tail_weight ntail x cols), then GELU (gelu_after != 0) or plus residual (non-NULL), then
 * (norm_weight non-NULL) the layer norm of each row with norm_weight, norm_bias (NULL: none)
 * and eps; row_buffer holds cols floats. zero_points NULL: symmetric rows (wsums unread).
 * bias: never NULL. */
void scale_back(const int32_t *sums, int64_t rows, int64_t cols, const float *wscale,
                const float *rscale, const float *bias, const int32_t *zero_points,
                const int32_t *wsums, const float *tail_in, int64_t ntail, int64_t ldtail,
                const float *tail_weight, const float *residual, int64_t ldres, int gelu_after,
                float *out, int64_t ldout, const float *norm_weight, const float *norm_bias,
                float eps, float *row_buffer) {
    const int after = gelu_after ? 1 : (residual ? 2 : 0);
    for (int64_t r = 0; r < rows; r++) {
        const int32_t *s = sums + r * cols;
        float *o = out + r * ldout;
        const float rs = rscale[r];
        const float *res = residual ? residual + r * ldres : 0;
        const int32_t z = zero_points ? zero_points[r] : 0;
        if (ntail > 0) { /* scaled, then the float channels, then GELU or the residual */
            if (zero_points)
                scale_back_row(s, cols, wscale, rs, bias, 1, z, wsums, 0, res, o);
            else
                scale_back_row(s, cols, wscale, rs, bias, 0, 0, wsums, 0, res, o);
            add_float_channels(o, cols, tail_in + r * ldtail, ntail, tail_weight, after, res);
        } else if (zero_points) {
            if (after == 1)
                scale_back_row(s, cols, wscale, rs, bias, 1, z, wsums, 1, res, o);
            else if (after == 2)
                scale_back_row(s, cols, wscale, rs, bias, 1, z, wsums, 2, res, o);
            else
                scale_back_row(s, cols, wscale, rs, bias, 1, z, wsums, 0, res, o);
        } else if (after == 1) {
            scale_back_row(s, cols, wscale, rs, bias, 0, 0, wsums, 1, res, o);
        } else if (after == 2) {
            scale_back_row(s, cols, wscale, rs, bias, 0, 0, wsums, 2, res, o);
        } else {
            scale_back_row(s, cols, wscale, rs, bias, 0, 0, wsums, 0, res, o);
        }
        if (norm_weight) norm_row(o, cols, norm_weight, norm_bias, eps, row_buffer);
    }
}

/* The feed-forward pair's middle: GELU of the first product's symmetric sums (as scale_back),
 * quantised asymmetrically for the second product without leaving the row: its first
 * cols - tail values into q (rows x (cols - tail)), scales and zero_points; its last `tail`
 * values (the channels the second product multiplies in float32) into tail_out (rows x tail).
 * row_buffer holds cols floats. */
void gelu_quantise(const int32_t *sums, int64_t rows, int64_t cols, const float *wscale,
                   const float *rscale, const float *bias, int64_t tail, int8_t *q,
                   float *scales, int32_t *zero_points, float *tail_out, float *row_buffer) {
    const int64_t kept = cols - tail;
    float *restrict v = row_buffer;
    for (int64_t r = 0; r < rows; r++) {
        scale_back_row(sums + r * cols, cols, wscale, rscale[r], bias, 0, 0, 0, 1, 0, v);
        float low = 0.f, high = 0.f;
        for (int64_t c = 0; c < kept; c++) {
            low = v[c] < low ? v[c] : low;
            high = v[c] > high ? v[c] : high;
        }
        asymmetric_row(v, kept, low, high, q + r * kept, scales + r, zero_points + r);
        for (int64_t c = 0; c < tail; c++) tail_out[r * tail + c] = v[kept + c];
    }
}
