/*
 * emu_stats.c - per-entity counters as one JSON document.
 */
#include "emu_stats.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static json_t *entity_json(const emu_entity_t *e)
{
    const emu_stats_t *st = &e->st;
    json_t *reasons = json_object();
    for (int i = 0; i < EMU_REASONS_MAX; i++)
        if (st->by_reason[i].n)
            json_object_set_new(reasons, st->by_reason[i].reason,
                                json_integer((json_int_t)st->by_reason[i].n));
    json_t *o =
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:o,s:I,s:I}", "active",
                  (json_int_t)e->avail.count, "locked", (json_int_t)e->locked.count, "deferred",
                  (json_int_t)e->deferred.count, "scheduled", (json_int_t)e->scheduled.count,
                  "sent", (json_int_t)st->sent, "delivered", (json_int_t)st->delivered, "completed",
                  (json_int_t)st->completed, "abandoned", (json_int_t)st->abandoned, "released",
                  (json_int_t)st->released, "dead_lettered", (json_int_t)st->dead_lettered,
                  "dead_lettered_by_reason", reasons, "duplicate_detected",
                  (json_int_t)st->duplicate_detected, "expired", (json_int_t)st->expired);
    if (o && e->sessions) {
        /* Sessions locked by a receiver now (session entities only). */
        json_object_set_new(o, "sessions_held", json_integer((json_int_t)e->n_held));
        json_object_set_new(o, "session_state_sets",
                            json_integer((json_int_t)st->session_state_sets));
    }
    return o;
}

/* thread: proactor */
char *emu_stats_json(const emu_ns_t *ns)
{
    json_t *ents = json_object();
    for (size_t i = 0; i < ns->n; i++)
        json_object_set_new(ents, ns->ents[i]->path, entity_json(ns->ents[i]));
    json_t *conns =
        json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "accepted", (json_int_t)ns->conn_accepted, "open",
                  (json_int_t)ns->conn_open, "forced_closed", (json_int_t)ns->conn_forced,
                  "tokens_refused", (json_int_t)ns->tokens_refused, "links_expired",
                  (json_int_t)ns->links_expired, "links_read_only",
                  (json_int_t)ns->links_read_only);
    json_t *faults = json_pack("{s:I,s:I,s:I,s:I}", "server_busy", (json_int_t)ns->server_busy,
                               "links_stalled", (json_int_t)ns->links_stalled,
                               "links_idle_closed", (json_int_t)ns->links_idle_closed,
                               "conns_idle_closed", (json_int_t)ns->conns_idle_closed);
    json_t *root = json_pack("{s:I,s:o,s:o,s:o}", "seq", (json_int_t)ns->stats_seq, "entities",
                             ents, "connections", conns, "faults", faults);
    char *s = root ? json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(root);
    return s;
}

/* thread: proactor */
int emu_stats_write(emu_ns_t *ns, const char *path)
{
    ns->stats_seq++;
    char *s = emu_stats_json(ns);
    if (!s)
        return -1;
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    int rc = -1;
    if (fp) {
        size_t n = strlen(s);
        rc = fwrite(s, 1, n, fp) == n && fputc('\n', fp) != EOF ? 0 : -1;
        if (fclose(fp) != 0)
            rc = -1;
        if (rc == 0 && rename(tmp, path) != 0)
            rc = -1;
    }
    free(s);
    return rc;
}
