/*
 * memory_budget.h - the most memory a cachetd process started with these
 * settings can hold, term by term (`cachetd --memory-budget`).
 *
 * Why the engine answers it: the pod's memory limit, the protocol tests'
 * bound, the benchmarks' cgroups and the docs all need this number, and only
 * the engine knows how it allocates. Every copy elsewhere drifted; now each
 * of them asks the binary (memory_budget.c says how each term is derived).
 *
 * Concurrency: pure functions of a parsed struct settings, called before
 * any thread exists.
 */
#ifndef CACHET_MEMORY_BUDGET_H
#define CACHET_MEMORY_BUDGET_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "settings.h"

#define MEMORY_TERMS_MAX 32

struct memory_term {
    const char *name;    /* stable: the operator's Go test and the protocol tests read it */
    uint64_t    bytes;
};

struct memory_budget {
    struct memory_term terms[MEMORY_TERMS_MAX];
    int      nterms;
    uint64_t total;      /* the sum of the terms */
    bool     bounded;    /* false when some memory has no cap: reasons say which */
    const char *reasons[4];
    int      nreasons;
};

void memory_budget_of(const struct settings *s, struct memory_budget *b);
/* One JSON object: {"terms": {name: bytes, ...}, "total": bytes, "bounded": bool,
 * "unbounded": [reason, ...]}; the list is empty when bounded. */
void memory_budget_print_json(const struct memory_budget *b, FILE *out);

#endif
