/*
 * ext_knob.h - the extstore settings a client changes at run time with
 * memcached 1.6.45's `extstore SETTING VALUE` command.
 *
 * Why a header of its own: the request parser (base layer) resolves the
 * setting's name and the storage core (ext_items.c) applies it; neither may
 * include the other, so the names they share live below both.
 *
 * Concurrency: none here; ext_items.c stores each value with a relaxed
 * atomic write that its readers (flusher, compactor, workers) load the
 * same way.
 */
#ifndef CACHET_EXT_KNOB_H
#define CACHET_EXT_KNOB_H

enum ext_knob {
    EXT_KNOB_FREE_MEMCHUNKS,  /* `extstore free_memchunks CLASS LIMIT`: accepted, no effect (memcached) */
    EXT_KNOB_ITEM_SIZE,       /* ext_item_size */
    EXT_KNOB_ITEM_AGE,        /* ext_item_age */
    EXT_KNOB_LOW_TTL,         /* ext_low_ttl */
    EXT_KNOB_RECACHE_RATE,    /* ext_recache_rate */
    EXT_KNOB_COMPACT_UNDER,   /* ext_compact_under */
    EXT_KNOB_DROP_UNDER,      /* ext_drop_under */
    EXT_KNOB_MAX_SLEEP,       /* ext_max_sleep, microseconds */
    EXT_KNOB_MAX_FRAG,        /* ext_max_frag, a fraction */
    EXT_KNOB_DROP_UNREAD,     /* ext_drop_unread: 0 is no, any other number yes */
};

#endif
