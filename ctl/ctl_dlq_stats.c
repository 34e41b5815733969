/*
 * ctl_dlq_stats.c - `inboxctl dlq stats` (see ctl_dlq_stats.h): pages through
 * the dead-letter queue by peek and counts each message into its group in
 * an open-addressing table keyed by the group id.
 *
 * thread: the caller's.
 */
#include "ctl_dlq_stats.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ib_log.h"

#define PEEK_PAGE 500
#define DESC_MAX 160
#define TABLE_SIZE (CTL_DLQ_GROUPS_MAX * 2) /* a power of two, half full at most */

typedef struct group {
    uint64_t hash; /* 0: free slot */
    char id[CTL_DLQ_GROUP_ID_LEN + 1];
    char *reason, *cls, *route, *code, *desc;
    long long count, oldest_ms, newest_ms;
} group_t;

typedef struct {
    group_t *slots;
    size_t ngroups;
    long long total, other; /* other: messages of groups beyond CTL_DLQ_GROUPS_MAX */
    long long unreadable;   /* entries peek could not decode: in no group, not in total */
    bool nomem;             /* counting stopped: out of memory */
} stats_t;

/* The five fields of a message's group (borrowed from msg, or from the buffers). */
typedef struct {
    const char *reason, *cls;
    char route[24], code[48], desc[DESC_MAX + 1];
} gkey_t;

static void key_of(const sb_msg_t *msg, gkey_t *k)
{
    const sb_prop_t *p;
    k->reason = msg->dead_letter_reason ? msg->dead_letter_reason : "";
    p = sb_msg_prop(msg, "inboxd-error-class");
    k->cls = p && p->str ? p->str : "";
    p = sb_msg_prop(msg, "inboxd-route");
    k->route[0] = '\0';
    if (p)
        snprintf(k->route, sizeof k->route, "%lld", p->str ? atoll(p->str) : p->i);
    const sb_prop_t *st = sb_msg_prop(msg, "inboxd-sqlstate"),
                    *nat = sb_msg_prop(msg, "inboxd-native-error");
    k->code[0] = '\0';
    if (st || nat)
        snprintf(k->code, sizeof k->code, "%s/%lld", st && st->str ? st->str : "",
                 nat ? (nat->str ? atoll(nat->str) : nat->i) : 0);
    /* The first line only: the rest names the message (ids, values). */
    const char *d = msg->dead_letter_description ? msg->dead_letter_description : "";
    size_t n = strcspn(d, "\r\n");
    if (n > DESC_MAX)
        n = DESC_MAX;
    memcpy(k->desc, d, n);
    k->desc[n] = '\0';
}

/* FNV-1a over the fields, each ended by a unit separator. */
static uint64_t key_hash(const gkey_t *k)
{
    const char *f[] = {k->reason, k->cls, k->route, k->code, k->desc};
    uint64_t h = 14695981039346656037ULL;
    for (size_t i = 0; i < 5; i++) {
        for (const unsigned char *s = (const unsigned char *)f[i]; *s; s++)
            h = (h ^ *s) * 1099511628211ULL;
        h = (h ^ 0x1f) * 1099511628211ULL;
    }
    return h ? h : 1;
}

static void id_of(uint64_t h, char *id)
{
    snprintf(id, CTL_DLQ_GROUP_ID_LEN + 1, "%012llx",
             (unsigned long long)(h >> (64 - 4 * CTL_DLQ_GROUP_ID_LEN)));
}

void ctl_dlq_group_id(const sb_msg_t *msg, char *id)
{
    gkey_t k;
    key_of(msg, &k);
    id_of(key_hash(&k), id);
}

bool ctl_dlq_group_filter(void *ctx, const sb_msg_t *msg)
{
    char id[CTL_DLQ_GROUP_ID_LEN + 1];
    ctl_dlq_group_id(msg, id);
    return strcmp(id, (const char *)ctx) == 0;
}

/* Counts msg into its group; false when out of memory. */
static bool count(stats_t *st, const sb_msg_t *msg)
{
    gkey_t k;
    key_of(msg, &k);
    uint64_t h = key_hash(&k);
    size_t i = (size_t)h & (TABLE_SIZE - 1);
    while (st->slots[i].hash && st->slots[i].hash != h)
        i = (i + 1) & (TABLE_SIZE - 1);
    group_t *g = &st->slots[i];
    st->total++;
    if (!g->hash) {
        if (st->ngroups == CTL_DLQ_GROUPS_MAX) {
            st->other++;
            return true;
        }
        g->reason = strdup(k.reason);
        g->cls = strdup(k.cls);
        g->route = strdup(k.route);
        g->code = strdup(k.code);
        g->desc = strdup(k.desc);
        if (!g->reason || !g->cls || !g->route || !g->code || !g->desc)
            return false;
        g->hash = h;
        id_of(h, g->id);
        g->oldest_ms = g->newest_ms = msg->enqueued_ms;
        st->ngroups++;
    }
    g->count++;
    if (msg->enqueued_ms && (msg->enqueued_ms < g->oldest_ms || !g->oldest_ms))
        g->oldest_ms = msg->enqueued_ms;
    if (msg->enqueued_ms > g->newest_ms)
        g->newest_ms = msg->enqueued_ms;
    return true;
}

static int by_count(const void *a, const void *b)
{
    const group_t *x = *(group_t *const *)a, *y = *(group_t *const *)b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return strcmp(x->id, y->id);
}

/* sb_sender_peek_each's callback: counts one message, stops when out of memory. */
static bool count_each(const sb_msg_t *msg, void *arg)
{
    stats_t *st = arg;
    st->nomem = !count(st, msg);
    return !st->nomem;
}

/* Peeks the whole DLQ; 0, or 1 after a failure (on stderr). */
static int collect(sb_sender_t *snd, const char *dlq, stats_t *st)
{
    ib_error_t err;
    if (sb_sender_peek_each(snd, dlq, 1, PEEK_PAGE, count_each, st, &st->unreadable, &err) !=
        IB_E_OK) {
        fprintf(stderr, "inboxctl: peek of %s failed: %s\n", dlq, err.text);
        return 1;
    }
    if (st->nomem) {
        fprintf(stderr, "inboxctl: out of memory\n");
        return 1;
    }
    return 0;
}

static const char *or_dash(const char *s)
{
    return s && *s ? s : "-";
}

static void print_table(FILE *out, const char *dlq, const stats_t *st, group_t **v, double secs)
{
    fprintf(out, "%s: %lld dead letters in %zu groups (read by peek in %.2f s)\n", dlq, st->total,
            st->ngroups, secs);
    fprintf(out, "%-12s %8s  %-24s  %-24s  %-26s %-9s %-5s %-10s %s\n", "GROUP", "COUNT",
            "OLDEST_ENQUEUED", "NEWEST_ENQUEUED", "REASON", "CLASS", "ROUTE", "CODE",
            "DESCRIPTION");
    for (size_t i = 0; i < st->ngroups; i++) {
        char o[40], n[40];
        ib_time_rfc3339(o, sizeof o, v[i]->oldest_ms);
        ib_time_rfc3339(n, sizeof n, v[i]->newest_ms);
        fprintf(out, "%-12s %8lld  %-24s  %-24s  %-26s %-9s %-5s %-10s %s\n", v[i]->id,
                v[i]->count, o, n, or_dash(v[i]->reason), or_dash(v[i]->cls),
                or_dash(v[i]->route), or_dash(v[i]->code), or_dash(v[i]->desc));
    }
    if (st->other)
        fprintf(out, "%-12s %8lld  (groups beyond the first %d)\n", "other", st->other,
                CTL_DLQ_GROUPS_MAX);
    if (st->unreadable)
        fprintf(out, "%-12s %8lld  (entries that could not be decoded: not counted above)\n",
                "unreadable", st->unreadable);
}

static json_t *jstr_or_null(const char *s)
{
    return s && *s ? json_string(s) : json_null();
}

static void print_json(FILE *out, const char *dlq, const stats_t *st, group_t **v, double secs)
{
    json_t *groups = json_array();
    for (size_t i = 0; i < st->ngroups; i++) {
        char o[40], n[40];
        ib_time_rfc3339(o, sizeof o, v[i]->oldest_ms);
        ib_time_rfc3339(n, sizeof n, v[i]->newest_ms);
        json_array_append_new(
            groups, json_pack("{s:s,s:I,s:o,s:o,s:o,s:o,s:o,s:s,s:s}", "group", v[i]->id, "count",
                              (json_int_t)v[i]->count, "reason", jstr_or_null(v[i]->reason),
                              "error_class", jstr_or_null(v[i]->cls), "route",
                              *v[i]->route ? json_integer(atoll(v[i]->route)) : json_null(),
                              "code", jstr_or_null(v[i]->code), "description",
                              jstr_or_null(v[i]->desc), "oldest_enqueued", o, "newest_enqueued",
                              n));
    }
    json_t *j = json_pack("{s:s,s:I,s:I,s:I,s:o,s:f}", "entity", dlq, "total",
                          (json_int_t)st->total, "other", (json_int_t)st->other, "unreadable",
                          (json_int_t)st->unreadable, "groups", groups, "elapsed_s", secs);
    char *t = j ? json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    if (t)
        fprintf(out, "%s\n", t);
    free(t);
    json_decref(j);
}

int ctl_dlq_stats_run(sb_sender_t *snd, const char *entity, bool json, FILE *out)
{
    char dlq[600];
    snprintf(dlq, sizeof dlq, "%s/$DeadLetterQueue", entity);
    stats_t st = {calloc(TABLE_SIZE, sizeof(group_t)), 0, 0, 0, 0, false};
    group_t **v = calloc(CTL_DLQ_GROUPS_MAX, sizeof *v);
    if (!st.slots || !v) {
        free(st.slots);
        free(v);
        fprintf(stderr, "inboxctl: out of memory\n");
        return 1;
    }
    long long t0 = ib_mono_ms();
    int rc = collect(snd, dlq, &st);
    double secs = (ib_mono_ms() - t0) / 1000.0;
    if (rc == 0) {
        size_t n = 0;
        for (size_t i = 0; i < TABLE_SIZE; i++)
            if (st.slots[i].hash)
                v[n++] = &st.slots[i];
        qsort(v, n, sizeof *v, by_count);
        if (json)
            print_json(out, dlq, &st, v, secs);
        else
            print_table(out, dlq, &st, v, secs);
    }
    for (size_t i = 0; i < TABLE_SIZE; i++) {
        group_t *g = &st.slots[i];
        free(g->reason);
        free(g->cls);
        free(g->route);
        free(g->code);
        free(g->desc);
    }
    free(st.slots);
    free(v);
    return rc;
}
