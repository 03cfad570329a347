/*
 * test_shards.c - the SHARDS estimator (src/shards.c) against an exact LRU
 * simulation of the same trace.
 *
 * The trace: Zipf(0.9) reads over 200,000 keys, each key with its own size
 * (50 to ~4000 bytes, log-uniform), 2,000,000 references; an LRU cache of a
 * byte capacity is simulated exactly (a miss fills the cache, the least
 * recently used items leave until the new one fits) at 12 capacities from
 * 1/64 to 2x the trace's footprint. The estimator, fed the same references
 * with 8192 sampled keys, must match the exact miss ratios with a mean
 * absolute error below 0.02 (the target; the paper reports < 0.01).
 * A second trace mixes in a scan (one-time keys) so the curve has a
 * plateau. Plus the mechanics: the sampling rate falls only when the
 * sample is full, and a trace of fewer keys than the sample is exact.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "harness.h"
#include "shards.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
static double rnd01(void) { return (double)(rnd() >> 11) / 9007199254740992.0; }

static uint64_t mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct trace { uint32_t *keys; size_t n; uint32_t *size; uint32_t nkeys; uint64_t footprint; };

static struct trace make_trace(uint32_t nkeys, size_t n, double alpha, double scan_share)
{
    struct trace t = { malloc(n * sizeof(uint32_t)), n, malloc((nkeys + n) * sizeof(uint32_t)), nkeys, 0 };
    double *cdf = malloc(nkeys * sizeof(double)), sum = 0;
    for (uint32_t k = 0; k < nkeys; k++) cdf[k] = sum += 1.0 / pow(k + 1, alpha);
    for (uint32_t k = 0; k < nkeys + n; k++) t.size[k] = (uint32_t)(50 * exp(rnd01() * log(80.0)));
    uint32_t next_scan = nkeys;
    for (size_t i = 0; i < n; i++) {
        if (scan_share > 0 && rnd01() < scan_share) { t.keys[i] = next_scan++; continue; }
        double u = rnd01() * sum;
        uint32_t lo = 0, hi = nkeys - 1;
        while (lo < hi) { uint32_t mid = (lo + hi) / 2; if (cdf[mid] < u) lo = mid + 1; else hi = mid; }
        t.keys[i] = lo;
    }
    /* the footprint of the keys the trace touches */
    char *seen = calloc(nkeys + n, 1);
    for (size_t i = 0; i < n; i++) if (!seen[t.keys[i]]++) t.footprint += t.size[t.keys[i]];
    free(seen);
    free(cdf);
    return t;
}

/* Exact LRU of `capacity` bytes: a doubly linked list over key ids. */
static double lru_miss_ratio(const struct trace *t, uint64_t capacity)
{
    uint32_t nk = t->nkeys + (uint32_t)t->n;
    int32_t *prev = malloc(nk * sizeof(int32_t)), *next = malloc(nk * sizeof(int32_t));
    char *in = calloc(nk, 1);
    int32_t head = -1, tail = -1;   /* head: most recent */
    uint64_t used = 0, misses = 0;
    for (size_t i = 0; i < t->n; i++) {
        int32_t k = (int32_t)t->keys[i];
        if (in[k]) {
            if (head != k) {   /* move to front */
                next[prev[k]] = next[k];
                if (next[k] >= 0) prev[next[k]] = prev[k]; else tail = prev[k];
                prev[k] = -1; next[k] = head; prev[head] = k; head = k;
            }
            continue;
        }
        misses++;
        if (t->size[k] > capacity) continue;
        while (used + t->size[k] > capacity) {
            int32_t v = tail;
            tail = prev[v];
            if (tail >= 0) next[tail] = -1; else head = -1;
            in[v] = 0;
            used -= t->size[v];
        }
        in[k] = 1;
        used += t->size[k];
        prev[k] = -1; next[k] = head;
        if (head >= 0) prev[head] = k; else tail = k;
        head = k;
    }
    free(prev); free(next); free(in);
    return (double)misses / (double)t->n;
}

static double mean_abs_error(const struct trace *t, unsigned sample_keys, double *worst)
{
    struct shards *s = shards_new(sample_keys);
    CHECK(s != NULL);
    for (size_t i = 0; i < t->n; i++) {
        uint64_t h = mix64(t->keys[i]);
        if (shards_sampled(shards_threshold(s), h)) shards_reference(s, h, t->size[t->keys[i]]);
    }
    static const double fractions[] = { 1.0 / 64, 1.0 / 32, 1.0 / 16, 1.0 / 8, 3.0 / 16, 1.0 / 4,
                                        3.0 / 8, 1.0 / 2, 3.0 / 4, 1.0, 1.5, 2.0 };
    double err = 0;
    *worst = 0;
    for (size_t i = 0; i < sizeof fractions / sizeof fractions[0]; i++) {
        uint64_t cap = (uint64_t)(t->footprint * fractions[i]);
        double exact = lru_miss_ratio(t, cap), est = shards_miss_ratio(s, cap, t->n);
        printf("  cache %12llu bytes: exact %.4f, SHARDS %.4f\n", (unsigned long long)cap, exact, est);
        err += fabs(exact - est);
        if (fabs(exact - est) > *worst) *worst = fabs(exact - est);
    }
    printf("  sampled keys %u, rate %.5f\n", shards_keys(s), (double)shards_threshold(s) / SHARDS_FULL_RATE);
    shards_free(s);
    return err / (sizeof fractions / sizeof fractions[0]);
}

static void check_trace(const char *what, uint32_t nkeys, size_t n, double alpha, double scan_share)
{
    struct trace t = make_trace(nkeys, n, alpha, scan_share);
    double worst, mae = mean_abs_error(&t, 8192, &worst);
    printf("  %s: mean absolute error %.4f, worst %.4f\n", what, mae, worst);
    CHECK(mae < 0.02);
    free(t.keys);
    free(t.size);
}

static void test_zipf_against_exact_lru(void) { check_trace("Zipf 0.9", 200000, 2000000, 0.9, 0); }
static void test_scan_mixed_against_exact_lru(void) { check_trace("Zipf 0.8 + 20% scan", 100000, 1500000, 0.8, 0.2); }

/* Fewer keys than the sample: rate 1, every reference counted, the curve
 * is the exact one (up to the histogram's 1/16 bucket width). */
static void test_small_key_set_is_exact(void)
{
    struct trace t = make_trace(1000, 100000, 1.0, 0);
    struct shards *s = shards_new(8192);
    for (size_t i = 0; i < t.n; i++) shards_reference(s, mix64(t.keys[i]), t.size[t.keys[i]]);
    CHECK(shards_threshold(s) == SHARDS_FULL_RATE);
    CHECK(shards_sampled_references(s) == (double)t.n);
    for (double f = 0.1; f < 1.2; f += 0.2) {
        uint64_t cap = (uint64_t)(t.footprint * f);
        CHECK(fabs(lru_miss_ratio(&t, cap) - shards_miss_ratio(s, cap, t.n)) < 0.02);
    }
    shards_free(s);
    free(t.keys); free(t.size);
}

static void test_rate_falls_when_the_sample_is_full(void)
{
    struct shards *s = shards_new(64);
    for (uint64_t k = 0; k < 64; k++) shards_reference(s, mix64(k), 100);
    CHECK(shards_threshold(s) == SHARDS_FULL_RATE);
    CHECK(shards_keys(s) == 64);
    for (uint64_t k = 64; k < 10000; k++) {
        uint64_t h = mix64(k);
        if (shards_sampled(shards_threshold(s), h)) shards_reference(s, h, 100);
    }
    CHECK(shards_threshold(s) < SHARDS_FULL_RATE / 50);
    CHECK(shards_keys(s) <= 64);
    /* never-seen keys: all misses, at any size */
    CHECK(shards_miss_ratio(s, 1 << 30, 10000) > 0.99);
    shards_clear(s);
    CHECK(shards_threshold(s) == SHARDS_FULL_RATE && shards_keys(s) == 0);
    shards_free(s);
}

static void test_memory_is_what_it_says(void)
{
    /* the bound the memory formula uses (memory_budget.c) */
    CHECK(shards_bytes(8192) < 1024 * 1024);
    CHECK(shards_bytes(8192) > 8192 * 64);
}

int main(void)
{
    TEST(test_rate_falls_when_the_sample_is_full);
    TEST(test_small_key_set_is_exact);
    TEST(test_memory_is_what_it_says);
    TEST(test_zipf_against_exact_lru);
    TEST(test_scan_mixed_against_exact_lru);
    return harness_finish();
}
