/*
 * emu_stats.h - the stats file tests read to assert broker state.
 *
 * Format (README.md): {"seq":N,"entities":{"<path>":{"active":N,"locked":N,
 * "deferred":N,"scheduled":N,"sent":N,"delivered":N,"completed":N,
 * "abandoned":N,"released":N,"dead_lettered":N,"dead_lettered_by_reason":
 * {"<reason>":N},"duplicate_detected":N,"expired":N}, ...}}
 *
 * thread: proactor.
 */
#ifndef EMU_STATS_H
#define EMU_STATS_H

#include "emu_entity.h"

/* Renders the stats JSON; the caller frees the string. NULL when out of memory. */
char *emu_stats_json(const emu_ns_t *ns);

/*
 * Counts one more rendering (ns->stats_seq, the file's "seq": a reader that
 * saw seq S knows a file with seq S + 2 was rendered after its read) and
 * writes the stats JSON to path atomically (temp file + rename). 0 or -1.
 */
int emu_stats_write(emu_ns_t *ns, const char *path);

#endif
