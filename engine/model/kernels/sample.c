// Token sampling for rows of logits: temperature, min-p, top-k, top-p, and one draw by inverse CDF from a
// uniform the caller gives (engine/sampler.py; fs_draw in fs.h). Self-contained: no other
// kernel file is used. Each draw reads its row and its fs_draw only, so a token never depends on the batch.
//
// The distribution is engine/sampler.py's: y = logit / T; min-p drops y < max(y) + log(min_p); top-k keeps
// y >= the k-th largest y (ties at the k-th all kept); top-p orders what is left by (y descending, index
// ascending) and keeps the shortest prefix whose probability exceeds top_p, probabilities normalised over what
// min-p and top-k kept. What is kept is always a prefix of that order: it is reported by its last element.
//
// Two vectorised passes over the row (y and its maximum; e = exp(y - max) and its sum), then work on candidates
// only. Top-p sorts nothing: a third pass weighs the tokens within 1, 2, 4 and 8 of the maximum; the candidates
// are those within the first distance that holds more than top_p of the mass (else within a bound beyond which
// less than 1 - top_p can lie), and a quickselect weighted by e finds the prefix among them (thousands of them go
// through a histogram by distance first). Top-k takes the first distance that holds k tokens, then a quickselect.
// Sums run in LANES fixed lanes, in the same order whatever the ISA flags, so every variant draws the same tokens.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs.h"

#pragma GCC optimize("no-trapping-math")  // lets the selects in the passes vectorise; no code here reads FP flags

#define LANES 16
#define BLOCK 256  // block maxima and sums let passes skip whole blocks and the draw find its block first


typedef struct {
    float y, e;
    int32_t i;
} cand;

typedef struct {  // one row's scratch, V floats each plus one entry per block
    float *y, *e, *bmax, *bsum;
    cand *c;
} scratch;

static inline int before(const cand *a, const cand *b) { return a->y > b->y || (a->y == b->y && a->i < b->i); }

static inline void swap(cand *a, cand *b) {
    const cand t = *a;
    *a = *b;
    *b = t;
}

// e^x for x <= 0 (x >= -inf, never NaN): Cephes' expf polynomial on x = n ln2 + r, 2^n through the exponent
// bits; 0 below -87.3. Plain C, no conversion instruction, so the loops around it vectorise under any ISA flags.
static inline float exp_nonpos(float x) {
    const float c = x < -87.3f ? -87.3f : x;
    const float t = c * 1.44269504088896341f + 12582912.f;  // 1.5 * 2^23: t's low bits hold n = round(c log2 e)
    const float nf = t - 12582912.f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    float r = c - nf * 0.693359375f;
    r = r - nf * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + (r + 1.f);
    const uint32_t bits = (tb - 0x4B400000u + 127u) << 23;  // 2^n
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.f : p * scale;
}

// y = x / T (NaN as -inf) and each block's maximum; returns the row's maximum.
static float scale_pass(const float *restrict x, int64_t V, float T, const scratch *s) {
    float *restrict y = s->y, top = -INFINITY;
    for (int64_t b0 = 0; b0 < V; b0 += BLOCK) {
        const int64_t end = b0 + BLOCK < V ? b0 + BLOCK : V;
        for (int64_t i = b0; i < end; i++) {
            const float v = x[i] / T;
            y[i] = v == v ? v : -INFINITY;
        }
        float lane[LANES];
        for (int l = 0; l < LANES; l++) lane[l] = -INFINITY;
        int64_t i = b0;
        for (; i + LANES <= end; i += LANES)
#pragma omp simd
            for (int l = 0; l < LANES; l++) lane[l] = y[i + l] > lane[l] ? y[i + l] : lane[l];
        float m = -INFINITY;
        for (; i < end; i++) m = y[i] > m ? y[i] : m;
        for (int l = 0; l < LANES; l++) m = lane[l] > m ? lane[l] : m;
        s->bmax[b0 / BLOCK] = m;
        top = m > top ? m : top;
    }
    return top;
}

// e = exp(y - ymax) where y >= floor, else 0; each block's sum; returns the row's sum (the blocks' in order).
static double exp_pass(int64_t V, float ymax, float floor, const scratch *s) {
    const float *restrict y = s->y;
    float *restrict e = s->e;
    double z = 0.0;
    for (int64_t b0 = 0; b0 < V; b0 += BLOCK) {
        const int64_t end = b0 + BLOCK < V ? b0 + BLOCK : V, b = b0 / BLOCK;
        if (s->bmax[b] < floor || s->bmax[b] - ymax < -87.3f) {  // nothing here weighs anything
            memset(e + b0, 0, (size_t)(end - b0) * sizeof(float));
            s->bsum[b] = 0.f;
            continue;
        }
        for (int64_t i = b0; i < end; i++) {
            const float v = exp_nonpos(y[i] - ymax);
            e[i] = y[i] >= floor ? v : 0.f;
        }
        float acc[LANES] = {0};  // lane l sums the block's entries l, l + LANES, ...: the same order on every ISA
        int64_t i = b0;
        for (; i + LANES <= end; i += LANES)
#pragma omp simd
            for (int l = 0; l < LANES; l++) acc[l] += e[i + l];
        for (int l = 0; i < end; i++, l++) acc[l] += e[i];
        float sum = 0.f;
        for (int l = 0; l < LANES; l++) sum += acc[l];
        s->bsum[b] = sum;
        z += sum;
    }
    return z;
}

// Mass and count of the tokens within PROBE_DIST[k] of the maximum, for each k: where top-p and top-k look first.
#define PROBES 4
static const float PROBE_DIST[PROBES] = {1.f, 2.f, 4.f, 8.f};

typedef struct {
    double mass[PROBES];
    int64_t count[PROBES];
} probe;

static void probe_pass(int64_t V, float ymax, const scratch *s, probe *pr) {
    const float *restrict y = s->y, *restrict e = s->e;
    float t[PROBES];
    for (int k = 0; k < PROBES; k++) t[k] = ymax - PROBE_DIST[k], pr->mass[k] = 0.0, pr->count[k] = 0;
    for (int64_t b0 = 0; b0 < V; b0 += BLOCK) {
        if (s->bmax[b0 / BLOCK] < t[PROBES - 1]) continue;
        const int64_t end = b0 + BLOCK < V ? b0 + BLOCK : V;
        float m[PROBES][LANES] = {{0}};
        int32_t c[PROBES][LANES] = {{0}};
        int64_t i = b0;
        for (; i + LANES <= end; i += LANES)
            for (int k = 0; k < PROBES; k++)
#pragma omp simd
                for (int l = 0; l < LANES; l++) {
                    const int in = y[i + l] >= t[k];
                    m[k][l] += in ? e[i + l] : 0.f;
                    c[k][l] += in;
                }
        for (int l = 0; i < end; i++, l++)
            for (int k = 0; k < PROBES; k++) {
                const int in = y[i] >= t[k];
                m[k][l] += in ? e[i] : 0.f;
                c[k][l] += in;
            }
        for (int k = 0; k < PROBES; k++) {
            float sum = 0.f;
            for (int l = 0; l < LANES; l++) sum += m[k][l], pr->count[k] += c[k][l];
            pr->mass[k] += sum;
        }
    }
}

static int64_t count_at_least(int64_t V, float t, const scratch *s) {
    int64_t n = 0;
    for (int64_t b0 = 0; b0 < V; b0 += BLOCK) {
        if (s->bmax[b0 / BLOCK] < t) continue;
        const int64_t end = b0 + BLOCK < V ? b0 + BLOCK : V;
        for (int64_t i = b0; i < end; i++) n += s->y[i] >= t;
    }
    return n;
}

// The tokens with y >= t, in index order, into s->c; returns how many. Branch-free: a third of a block may pass.
static int64_t collect(int64_t V, float t, const scratch *s) {
    int64_t n = 0;
    for (int64_t b0 = 0; b0 < V; b0 += BLOCK) {
        if (s->bmax[b0 / BLOCK] < t) continue;
        const int64_t end = b0 + BLOCK < V ? b0 + BLOCK : V;
        for (int64_t i = b0; i < end; i++) {
            s->c[n] = (cand){s->y[i], s->e[i], (int32_t)i};
            n += s->y[i] >= t;
        }
    }
    return n;
}

// Reorders c[0..n) so that its first m entries are the first m in the order `before` (in no particular order
// among themselves), m the smallest count whose weight (each entry's e, or 1 each when `unit`) exceeds `need`;
// returns m, or -1 when the whole weight does not exceed need. A quickselect: O(n) expected.
static int64_t select_prefix(cand *c, int64_t n, double need, int unit) {
    int64_t lo = 0, hi = n;
    while (hi - lo > 16) {
        const int64_t mid = lo + (hi - lo) / 2, last = hi - 1;  // median of three to the end: the pivot
        if (before(&c[mid], &c[lo])) swap(&c[mid], &c[lo]);
        if (before(&c[last], &c[lo])) swap(&c[last], &c[lo]);
        if (before(&c[mid], &c[last])) swap(&c[mid], &c[last]);
        const cand p = c[last];
        int64_t at = lo;
        double w = 0.0;
        for (int64_t j = lo; j < last; j++)
            if (before(&c[j], &p)) {
                w += unit ? 1.0 : (double)c[j].e;
                swap(&c[at++], &c[j]);
            }
        swap(&c[at], &c[last]);
        if (w > need) {
            hi = at;
            continue;
        }
        const double with_pivot = w + (unit ? 1.0 : (double)p.e);
        if (with_pivot > need) return at + 1;
        need -= with_pivot;
        lo = at + 1;
    }
    for (int64_t j = lo + 1; j < hi; j++)  // insertion sort of what is left, then the walk
        for (int64_t k = j; k > lo && before(&c[k], &c[k - 1]); k--) swap(&c[k], &c[k - 1]);
    for (int64_t j = lo; j < hi; j++) {
        need -= unit ? 1.0 : (double)c[j].e;
        if (need < 0.0) return j + 1;
    }
    return -1;
}

// Top-k: reorders c so that the tokens with y >= the k-th largest y (ties included) come first; returns how many.
static int64_t keep_top_k(cand *c, int64_t n, int64_t k) {
    if (n <= k) return n;
    select_prefix(c, n, (double)k - 0.5, 1);
    float kth = c[0].y;
    for (int64_t j = 1; j < k; j++) kth = c[j].y < kth ? c[j].y : kth;
    int64_t m = k;
    for (int64_t j = k; j < n; j++)
        if (c[j].y >= kth) swap(&c[m++], &c[j]);
    return m;
}

// The candidates for top-k: every token with y >= t for the largest t in ymax - 1, - 2, ... - 64 (and above
// floor) that holds k of them; every token >= floor when none does.
static int64_t top_k_candidates(int64_t V, float ymax, float floor, int64_t k, const probe *pr, const scratch *s) {
    for (int p = 0; p < PROBES; p++)
        if (ymax - PROBE_DIST[p] > floor && pr->count[p] >= k) return collect(V, ymax - PROBE_DIST[p], s);
    for (float d = 2.f * PROBE_DIST[PROBES - 1]; d <= 64.f; d *= 2.f) {
        const float t = ymax - d;
        if (t <= floor) break;
        if (count_at_least(V, t, s) >= k) return collect(V, t, s);
    }
    return collect(V, floor, s);
}

// A wide nucleus (thousands of tokens): the tokens with y >= t go by distance below ymax into BUCKETS equal buckets;
// the first buckets whose mass exceeds need are collected, and the prefix is selected among them only. Returns
// its length as select_prefix does (-1: rounding left the mass short).
#define BUCKETS 512
#define NARROW 2048  // candidates up to which a quickselect over all of them is the cheaper way

static inline int bucket_of(float y, float ymax, float scale) {
    const float f = (ymax - y) * scale;
    return f < (float)(BUCKETS - 1) ? (int)f : BUCKETS - 1;
}

static int64_t wide_nucleus(int64_t V, float ymax, float t, double need, const scratch *s) {
    const float scale = (float)BUCKETS / (ymax - t > 1e-30f ? ymax - t : 1e-30f);
    const int64_t n = collect(V, t, s);
    double mass[BUCKETS] = {0};
    for (int64_t j = 0; j < n; j++) mass[bucket_of(s->c[j].y, ymax, scale)] += s->c[j].e;
    int last = 0;
    for (double acc = mass[0]; acc <= need && last < BUCKETS - 1;) acc += mass[++last];
    int64_t kept = 0;
    for (int64_t j = 0; j < n; j++) {
        s->c[kept] = s->c[j];
        kept += bucket_of(s->c[j].y, ymax, scale) <= last;
    }
    return select_prefix(s->c, kept, need, 0);
}

// Top-p without top-k: the shortest prefix of the order, among every token >= floor, whose mass exceeds need,
// moved to the front of s->c; returns its length. Looks among the tokens within each probe distance that holds
// more than need, then within `bound` (where what is left out weighs less than the row's 1 - top_p), then all.
static int64_t nucleus(int64_t V, float ymax, float floor, double need, double bound, const probe *pr,
                       const scratch *s) {
    for (int k = 0; k <= PROBES; k++) {
        if (k < PROBES && !(pr->mass[k] > need)) continue;
        float t = ymax - (k < PROBES ? PROBE_DIST[k] : (float)bound);
        t = t > floor ? t : floor;
        const int64_t m = k < PROBES && pr->count[k] <= NARROW ? select_prefix(s->c, collect(V, t, s), need, 0)
                                                                : wide_nucleus(V, ymax, t, need, s);
        if (m > 0) return m;
    }
    const int64_t n = collect(V, floor, s), m = select_prefix(s->c, n, need, 0);
    return m > 0 ? m : n;  // rounding: the whole row's mass does not exceed need; keep it all
}

// Inverse CDF over the whole row in index order (no top-k, no top-p): block sums first, then the block.
static int64_t draw_full(int64_t V, double target, const scratch *s) {
    double acc = 0.0;
    int64_t b0 = 0;
    while (b0 + BLOCK < V && acc + s->bsum[b0 / BLOCK] <= target) acc += s->bsum[b0 / BLOCK], b0 += BLOCK;
    int64_t last = -1;
    for (int64_t i = b0; i < V; i++) {
        if (s->e[i] <= 0.f) continue;
        acc += s->e[i];
        last = i;
        if (acc > target) return i;
    }
    for (int64_t i = b0 - 1; last < 0 && i >= 0; i--)  // rounding ran past the end: the last token that weighs
        if (s->e[i] > 0.f) last = i;
    return last;
}

static void draw_one(const float *x, int64_t V, fs_draw *d, const scratch *s) {
    d->token = -1;
    const float ymax = scale_pass(x, V, d->temperature, s);
    if (!(ymax > -INFINITY && ymax < INFINITY)) return;  // nothing finite, or an infinite logit: greedy
    const float floor = ymax + d->log_min_p;
    const double z = exp_pass(V, ymax, floor, s);
    if (!(z > 0.0)) return;
    const int top_k = d->top_k > 0 && d->top_k < V, top_p = d->top_p < 1.f;
    if (!top_k && !top_p) {
        d->token = draw_full(V, d->u * z, s);
        d->last_y = floor, d->last_idx = V - 1;
        return;
    }
    probe pr;
    probe_pass(V, ymax, s, &pr);
    int64_t m;
    if (top_k) {
        const int64_t n = keep_top_k(s->c, top_k_candidates(V, ymax, floor, d->top_k, &pr, s), d->top_k);
        double za = 0.0;
        for (int64_t j = 0; j < n; j++) za += s->c[j].e;
        m = top_p ? select_prefix(s->c, n, (double)d->top_p * za, 0) : n;
        m = m > 0 ? m : n;
    } else {  // beyond ymax - bound: at most V e^-bound < (1 - top_p) z in all
        const double bound = log((double)V / ((1.0 - (double)d->top_p) * z)) + 1.0;
        m = nucleus(V, ymax, floor, (double)d->top_p * z, bound, &pr, s);
    }
    double kept = 0.0;
    int64_t last = 0;
    for (int64_t j = 0; j < m; j++) {
        kept += s->c[j].e;
        if (before(&s->c[last], &s->c[j])) last = j;
    }
    d->last_y = s->c[last].y, d->last_idx = s->c[last].i;
    const double target = d->u * kept;
    double acc = 0.0;
    for (int64_t j = 0; j < m; j++) {
        if (s->c[j].e <= 0.f) continue;
        acc += s->c[j].e;
        d->token = s->c[j].i;
        if (acc > target) return;
    }
}

// draws[n]: each reads row draws[i].row of logits [*, ld] (V columns, unit stride) and writes its outputs.
// Returns 0, or -1 when the scratch could not be allocated (no draw written).
FS_API int fs_sample_rows(const float *logits, int64_t ld, int64_t V, int64_t n, fs_draw *draws) {
    const int64_t blocks = (V + BLOCK - 1) / BLOCK;
    const size_t floats = (size_t)(2 * V + 2 * blocks) * sizeof(float);
    char *mem = malloc(floats + (size_t)V * sizeof(cand));
    if (mem == NULL) return -1;
    const scratch s = {(float *)mem, (float *)mem + V, (float *)mem + 2 * V, (float *)mem + 2 * V + blocks,
                       (cand *)(mem + floats)};
    for (int64_t i = 0; i < n; i++) draw_one(logits + draws[i].row * ld, V, &draws[i], &s);
    free(mem);
    return 0;
}
