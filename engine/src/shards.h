/*
 * shards.h - a miss-ratio curve estimator: SHARDS with a fixed sample size
 * (Waldspurger et al., FAST'15, "fixed-size SHARDS" with the SHARDS_adj
 * correction), byte-weighted: the curve is miss ratio against the bytes an
 * LRU cache holds.
 *
 * Why this method: it gives the whole curve (every cache size at once) from
 * a spatially hashed sample of the keys, in memory fixed by the sample size
 * whatever the key count, and a reference whose key is not sampled costs
 * one compare. The paper reports a mean absolute error below 0.01 with 8K
 * sampled keys; tests/unit/test_shards.c checks < 0.02 against an exact LRU
 * simulation of the same Zipf trace.
 *
 * Keys are 64-bit hashes. The top 24 bits are the sample value: a key is
 * sampled while its value is below the threshold (shards_sampled). When more
 * than `capacity` keys are sampled, the key with the largest value leaves
 * and the threshold drops to that value (the sampling rate R = threshold /
 * 2^24 only falls); the histogram is scaled by R_new / R_old.
 *
 * Concurrency: none inside; the caller serializes every call on one
 * estimator (mrc.c holds its lock). shards_sampled only reads a threshold
 * the caller publishes.
 */
#ifndef CACHET_SHARDS_H
#define CACHET_SHARDS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHARDS_SAMPLE_BITS 24
#define SHARDS_FULL_RATE   (1u << SHARDS_SAMPLE_BITS)   /* threshold of R = 1 */

struct shards;

static inline uint32_t shards_sample_value(uint64_t key_hash) { return (uint32_t)(key_hash >> (64 - SHARDS_SAMPLE_BITS)); }
static inline bool shards_sampled(uint32_t threshold, uint64_t key_hash) { return shards_sample_value(key_hash) < threshold; }

/* The bytes shards_new(capacity) allocates, all of it, at once. */
size_t shards_bytes(unsigned capacity);
struct shards *shards_new(unsigned capacity);   /* NULL: no memory */
void shards_free(struct shards *s);
/* Forget every reference (stats reset): the highest rate again. */
void shards_clear(struct shards *s);
/* Sample at most threshold / 2^24 of the keys, even before the sample is
 * full (clears the estimator). */
void shards_limit_rate(struct shards *s, uint32_t threshold);

/* The current threshold: a key is sampled iff shards_sampled(threshold, h). */
uint32_t shards_threshold(const struct shards *s);
/* A read of a sampled key; size: its bytes (0 = not known, a miss of a key
 * never stored: its last known size, else the mean of the sample). */
void shards_reference(struct shards *s, uint64_t key_hash, uint32_t size);
/* A store of a sampled key: its size changes, it is not a reference (the
 * read that missed was). */
void shards_resize(struct shards *s, uint64_t key_hash, uint32_t size);

/* Miss ratio of an LRU cache holding `cache_bytes` of items, given that
 * `references` reads were made in all (sampled or not) since the start:
 * the SHARDS_adj correction uses it. */
double shards_miss_ratio(const struct shards *s, uint64_t cache_bytes, uint64_t references);
/* Sampled keys held now, sampled references counted (scaled to the
 * current rate). */
unsigned shards_keys(const struct shards *s);
double shards_sampled_references(const struct shards *s);

#endif
