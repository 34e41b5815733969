/*
 * rl_relay.c - the outbox relay thread: claim, upload a large row's body
 * (rl_claim.c), send (on the client's sender link, sb_client_send_each),
 * mark, commit; backoff
 * on transient failures; bounded cleanup turns; counters for /metrics.
 * See rl_relay.h. Every function runs on the relay thread unless its
 * comment says otherwise.
 */
#include "rl_relay.h"
#include "rl_claim.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "db_outbox.h"
#include "fx_client.h"
#include "ib_backoff.h"
#include "ib_log.h"
#include "sb_condition.h"
#include "sb_msg.h"
#include "sb_client.h"
#include "sb_out.h"

#define BACKOFF_BASE_MS 200
#define SEND_TIMEOUT_MS 10000
#define STATS_EVERY_MS 1000
#define CLEANUP_EVERY_MS 60000
#define CLEANUP_FIRST_MS 5000
#define CLEANUP_BATCH 1000
#define CLEANUP_BATCHES_PER_TURN 20
#define GROUP_MAX 256 /* messages in flight at once on the sender link */

struct rl_relay {
    rl_relay_options_t opt;
    char *table;
    pthread_t tid;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, woken, joined;
    bool curl; /* fx_global_init done (claim check) */
    rl_claim_t *claim; /* NULL: no claim check */
    rl_relay_stats_t stats; /* guarded by mu */
    /* relay thread only */
    db_conn_t *dbc;
    int failures; /* consecutive transient failures: the backoff step */
    ib_rand_t seed; /* the backoff's state, seeded on first use */
    long long next_stats_ms, next_cleanup_ms;
};

/* ---- application properties ------------------------------------------------ */

ib_err_t rl_relay_props_parse(const char *text, sb_prop_t **props, size_t *n, void **holder,
                              ib_error_t *err)
{
    json_error_t jerr;
    json_t *j;
    size_t room;

    *props = NULL;
    *n = 0;
    *holder = NULL;
    if (!text || !*text) {
        *props = calloc(RL_PROPS_SPARE, sizeof(**props));
        return *props ? IB_E_OK
                      : ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    j = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    room = json_is_object(j) ? json_object_size(j) : 0;
    *props = calloc(room + RL_PROPS_SPARE, sizeof(**props));
    if (!*props) {
        json_decref(j);
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    /* Strings point into j (kept in *holder). */
    if (sb_out_props_from_json(j, *props, room, n, err) != IB_E_OK) {
        free(*props);
        *props = NULL;
        json_decref(j);
        return err->code;
    }
    *holder = j;
    return IB_E_OK;
}

void rl_relay_props_free(sb_prop_t *props, void *holder)
{
    free(props);
    json_decref(holder);
}

/* ---- waiting ----------------------------------------------------------------- */

/* Sleeps up to ms, returning early on stop (and on a wake when wakeable). */
static void nap(rl_relay_t *r, long long ms, bool wakeable)
{
    long long until = ib_mono_ms() + ms;
    pthread_mutex_lock(&r->mu);
    while (!r->stop && !(wakeable && r->woken))
        if (ib_cond_wait_until(&r->cv, &r->mu, until) == ETIMEDOUT)
            break;
    r->woken = false;
    pthread_mutex_unlock(&r->mu);
}

static bool stopping(rl_relay_t *r)
{
    bool s;
    pthread_mutex_lock(&r->mu);
    s = r->stop;
    pthread_mutex_unlock(&r->mu);
    return s;
}

/* thread: any */
void rl_relay_wake(rl_relay_t *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->woken = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* ---- counters ---------------------------------------------------------------- */

static void count_failed(rl_relay_t *r, const char *condition)
{
    rl_relay_stats_t *s = &r->stats;
    size_t i;
    if (!condition || !*condition)
        condition = "unknown";
    pthread_mutex_lock(&r->mu);
    for (i = 0; i < s->nfailed; i++)
        if (strcmp(s->failed[i].condition, condition) == 0)
            break;
    if (i == s->nfailed) {
        if (s->nfailed == RL_RELAY_CONDITIONS) {
            i = RL_RELAY_CONDITIONS - 1; /* the last slot collects the rest */
            ib_strlcpy(s->failed[i].condition, "other", sizeof(s->failed[i].condition));
        } else {
            ib_strlcpy(s->failed[i].condition, condition, sizeof(s->failed[i].condition));
            s->nfailed++;
        }
    }
    s->failed[i].count++;
    pthread_mutex_unlock(&r->mu);
}

/* thread: any */
void rl_relay_stats(void *relay, rl_relay_stats_t *out)
{
    rl_relay_t *r = relay;
    pthread_mutex_lock(&r->mu);
    *out = r->stats;
    pthread_mutex_unlock(&r->mu);
}

static void refresh_stats(rl_relay_t *r, bool force)
{
    long long pending, oldest, blocked, now = ib_mono_ms();
    ib_error_t err;
    if (!force && now < r->next_stats_ms)
        return;
    r->next_stats_ms = now + STATS_EVERY_MS;
    if (db_outbox_stats(r->dbc, r->table, &pending, &oldest, &err) != IB_E_OK ||
        db_outbox_blocked(r->dbc, r->table, &blocked, &err) != IB_E_OK)
        return;
    pthread_mutex_lock(&r->mu);
    r->stats.pending = pending;
    r->stats.oldest_pending_s = oldest;
    r->stats.blocked_sessions = blocked;
    pthread_mutex_unlock(&r->mu);
}

/* ---- one round ----------------------------------------------------------------- */

static void log_send_failure(const db_outbox_row_t *row, const ib_error_t *e, bool permanent)
{
    IB_LOG(permanent ? IB_LOG_ERROR : IB_LOG_WARN, permanent ? "outbox_failed" : "outbox_retry",
           IB_MSG(permanent ? "the broker refused an outbox message; the row is failed"
                            : "an outbox message could not be sent; it stays pending"),
           IB_I("outbox_id", row->id), IB_S("entity", row->entity),
           IB_S("message_id", row->message_id), IB_S("session_id", row->session_id),
           IB_S("condition", e->condition), IB_S("error_class", ib_class_name(e->cls)),
           IB_S("error", e->text), IB_I("attempt", row->attempts + 1));
}

/* The AMQP message of one row; props/holder from rl_relay_props_parse. */
static void row_msg(const db_outbox_row_t *row, sb_prop_t *props, size_t nprops, sb_out_msg_t *m)
{
    memset(m, 0, sizeof(*m));
    m->message_id = row->message_id;
    m->correlation_id = row->correlation_id;
    m->subject = row->subject;
    m->content_type = row->content_type;
    m->session_id = row->session_id;
    m->props = props;
    m->nprops = nprops;
    m->body = row->body;
    m->body_len = row->body ? row->body_len : 0;
}

/*
 * The rows [from, from + *len) that travel together, pipelined on one link:
 * one entity, at most one row per session id (a later row of a session is
 * never in flight beside an earlier one, so a failure cannot let it
 * overtake), at most GROUP_MAX.
 */
static size_t group_len(const db_outbox_row_t *rows, size_t from, size_t n)
{
    size_t len = 1;
    while (from + len < n && len < GROUP_MAX) {
        const db_outbox_row_t *next = &rows[from + len];
        bool clash = strcmp(next->entity, rows[from].entity) != 0;
        for (size_t k = from; !clash && next->session_id && k < from + len; k++)
            clash = rows[k].session_id && strcmp(rows[k].session_id, next->session_id) == 0;
        if (clash)
            break;
        len++;
    }
    return len;
}

static ot_span_t *publish_begin(rl_relay_t *r, const db_outbox_row_t *row, sb_prop_t *props,
                                size_t *nprops, char tp[OT_TRACEPARENT_LEN]);
static void publish_end(ot_span_t *s, const ib_error_t *res);

/* What a row needs while its message is out: its properties, its publish span, its blob. */
typedef struct row_out {
    sb_prop_t *props;
    void *holder;
    ot_span_t *span;
    char tp[OT_TRACEPARENT_LEN];
    rl_claim_ref_t claim; /* url NULL: the body goes in the message */
} row_out_t;

/*
 * A row above outbox.claim_check_over_bytes: its body uploaded, its
 * reference added to its properties; false with res set (transient: the
 * row is not sent and stays pending) when the upload failed.
 */
static bool claim_row(rl_relay_t *r, const db_outbox_row_t *row, row_out_t *ro, size_t *np,
                      ib_error_t *res)
{
    if (!rl_claim_wanted(r->claim, row))
        return true;
    if (rl_claim_upload(r->claim, row, &ro->claim, res) != IB_E_OK) {
        pthread_mutex_lock(&r->mu);
        r->stats.claim_upload_failed_total++;
        pthread_mutex_unlock(&r->mu);
        return false;
    }
    rl_claim_props(&ro->claim, ro->props, np);
    return true;
}

/* Sends rows [0, len), pipelined on one link, and fills res[] with each row's result. */
static void send_group(rl_relay_t *r, const db_outbox_row_t *rows, size_t len, ib_error_t *res)
{
    row_out_t *ro = calloc(len, sizeof(*ro));
    sb_out_msg_t *msgs = calloc(len, sizeof(*msgs));
    ib_error_t *ok_res = calloc(len, sizeof(*ok_res));
    size_t *map = calloc(len, sizeof(*map)), nok = 0;

    if (!ro || !msgs || !ok_res || !map) {
        for (size_t k = 0; k < len; k++)
            ib_error_set(&res[k], IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        len = 0;
    }
    for (size_t k = 0; k < len; k++) {
        size_t np = 0;
        ib_error_clear(&res[k]);
        if (rl_relay_props_parse(rows[k].properties, &ro[k].props, &np, &ro[k].holder,
                                 &res[k]) != IB_E_OK) {
            if (res[k].cls == IB_CLASS_PERMANENT)
                ib_strlcpy(res[k].condition, "inboxd:invalid-properties",
                           sizeof(res[k].condition));
            continue; /* never sent */
        }
        if (!claim_row(r, &rows[k], &ro[k], &np, &res[k]))
            continue; /* nothing is sent without its blob */
        if (r->opt.otel)
            ro[k].span = publish_begin(r, &rows[k], ro[k].props, &np, ro[k].tp);
        row_msg(&rows[k], ro[k].props, np, &msgs[nok]);
        if (ro[k].claim.url) {
            msgs[nok].body = NULL; /* the reference travels instead */
            msgs[nok].body_len = 0;
        }
        map[nok++] = k;
    }
    if (nok)
        sb_client_send_each(r->opt.client, rows[0].entity, msgs, nok, SEND_TIMEOUT_MS, ok_res);
    for (size_t j = 0; j < nok; j++)
        res[map[j]] = ok_res[j];
    for (size_t k = 0; k < len; k++) {
        if (ro[k].claim.url && res[k].code == IB_E_OK) {
            pthread_mutex_lock(&r->mu);
            r->stats.claim_checked_total++;
            pthread_mutex_unlock(&r->mu);
        }
        publish_end(ro[k].span, &res[k]);
        rl_relay_props_free(ro[k].props, ro[k].holder);
        rl_claim_ref_free(&ro[k].claim);
    }
    free(ro);
    free(msgs);
    free(ok_res);
    free(map);
}

/*
 * The publish span of a row (kind PRODUCER), a child of the span that wrote
 * it: the row's trace_context column (an emit writes its consumer span's
 * there), else its traceparent property (rows applications insert), else a
 * trace of its own. The message then carries the publish span's context in
 * traceparent and Diagnostic-Id, in place of the row's or added when the
 * row has none (props has room for them), so the next consumer is its
 * child. tp holds the value while the message is sent.
 */
static ot_span_t *publish_begin(rl_relay_t *r, const db_outbox_row_t *row, sb_prop_t *props,
                                size_t *nprops, char tp[OT_TRACEPARENT_LEN])
{
    enum { NKEYS = 2 }; /* of RL_PROPS_SPARE, the trace context's share */
    static const char *const keys[NKEYS] = {"traceparent", "Diagnostic-Id"};
    bool had[NKEYS] = {false, false};
    ot_ctx_t parent = {0};
    ot_span_t *s;
    if (row->trace_context)
        ot_ctx_parse(row->trace_context, &parent);
    for (size_t i = 0; i < *nprops && !parent.valid; i++)
        if (strcmp(props[i].key, "traceparent") == 0 && props[i].type == SB_PROP_STRING)
            ot_ctx_parse(props[i].str, &parent);
    if (!(s = ot_span_start_const(r->opt.otel, "send", OT_KIND_PRODUCER, &parent, false, 0)))
        return NULL;
    ot_span_str_const(s, "messaging.system", "servicebus");
    ot_span_str_const(s, "messaging.operation.name", "send");
    ot_span_str_const(s, "messaging.operation.type", "send");
    ot_span_str(s, "messaging.destination.name", row->entity);
    ot_span_str(s, "messaging.message.id", row->message_id);
    ot_span_str(s, "messaging.message.conversation_id", row->correlation_id);
    ot_span_int(s, "inboxd.outbox.attempts", row->attempts);
    ot_ctx_format(ot_span_ctx(s), tp);
    for (size_t i = 0; i < *nprops; i++)
        for (size_t k = 0; k < NKEYS; k++)
            if (strcmp(props[i].key, keys[k]) == 0) {
                props[i].type = SB_PROP_STRING;
                props[i].str = tp; /* the holder still frees the parsed value */
                had[k] = true;
            }
    for (size_t k = 0; k < NKEYS; k++)
        if (!had[k])
            props[(*nprops)++] = (sb_prop_t){.key = (char *)keys[k], .type = SB_PROP_STRING,
                                             .str = tp};
    return s;
}

static void publish_end(ot_span_t *s, const ib_error_t *res)
{
    if (s && res->code) {
        ot_span_str(s, "error.type", res->condition[0] ? res->condition : ib_err_name(res->code));
        ot_span_error(s, res->text);
    }
    ot_span_end(s, 0);
}

/*
 * After a row of a session failed for good, the session's later rows of
 * this claim [from, *n) are not sent: they stay pending, untouched, and the
 * next claims leave them out while the failed row holds them back.
 */
static void hold_session(db_outbox_row_t *rows, size_t from, size_t *n, const char *session_id)
{
    size_t kept = from;
    for (size_t i = from; i < *n; i++) {
        db_outbox_row_t *row = &rows[i];
        if (row->session_id && strcmp(row->session_id, session_id) == 0) {
            db_outbox_row_clear(row);
            continue;
        }
        if (kept != i)
            rows[kept] = *row;
        kept++;
    }
    *n = kept;
}

/*
 * Marks the rows of one group after their send: a failed one at once (its
 * own error text; a failed row of a session holds its later rows of this
 * claim back), a published one's id into pub[*npub] for the round's one
 * statement; a server-busy answer leaves the row untouched (the broker
 * throttles: no attempt is counted, the round backs off). *transient is set
 * by a transient failure. Returns false when
 * a mark fails (the round rolls back).
 */
static bool mark_group(rl_relay_t *r, db_outbox_row_t *rows, size_t from, size_t len, size_t *n,
                       const ib_error_t *res, long long *pub, size_t *npub, size_t *handled,
                       bool *transient)
{
    for (size_t k = 0; k < len; k++) {
        const db_outbox_row_t *row = &rows[from + k];
        const ib_error_t *se = &res[k];
        ib_error_t me;
        bool again = se->cls != IB_CLASS_PERMANENT;
        char why[700];
        if (se->code == IB_E_OK) {
            pub[(*npub)++] = row->id;
            (*handled)++;
            continue;
        }
        *transient |= again;
        log_send_failure(row, se, !again);
        if (sb_condition_busy(se->condition))
            continue; /* throttled: pending as it was, no attempt counted */
        snprintf(why, sizeof(why), "%s%s%s", se->condition, se->condition[0] ? ": " : "",
                 se->text);
        if (db_outbox_mark(r->dbc, r->table, row->id, again ? DB_OUTBOX_RETRY : DB_OUTBOX_FAILED,
                           why, &me) != IB_E_OK) {
            IB_LOG(IB_LOG_WARN, "outbox_mark", IB_MSG("the relay cannot mark an outbox row"),
                   IB_S("error", me.text), IB_S("sqlstate", me.sqlstate));
            return false;
        }
        if (again)
            continue;
        (*handled)++;
        count_failed(r, se->condition);
        if (row->session_id)
            hold_session(rows, from + len, n, row->session_id);
    }
    return true;
}

/* Marks the round's published rows and commits; false after a rollback. */
static bool finish_round(rl_relay_t *r, const long long *pub, size_t npub)
{
    ib_error_t err;
    if (npub && db_outbox_mark_published(r->dbc, r->table, pub, npub, &err) != IB_E_OK) {
        IB_LOG(IB_LOG_WARN, "outbox_mark", IB_MSG("the relay cannot mark outbox rows published"),
               IB_S("error", err.text), IB_S("sqlstate", err.sqlstate), IB_I("rows", npub));
        db_end(r->dbc, false, &err);
        return false;
    }
    if (db_end(r->dbc, true, &err) != IB_E_OK) {
        IB_LOG(IB_LOG_WARN, "outbox_commit", IB_MSG("the relay's commit failed"),
               IB_S("error", err.text), IB_S("sqlstate", err.sqlstate));
        db_end(r->dbc, false, &err);
        return false;
    }
    pthread_mutex_lock(&r->mu);
    r->stats.published_total += npub;
    pthread_mutex_unlock(&r->mu);
    return true;
}

/*
 * Claims, sends and marks one batch. Returns the rows handled (published
 * or failed), or -1 after a transient failure (the caller backs off). A
 * failure to mark or commit rolls every row back: sent ones are sent again
 * later with the same message id.
 */
static int round_once(rl_relay_t *r)
{
    db_outbox_row_t *rows = NULL;
    size_t n = 0, handled = 0, npub = 0;
    bool transient = false, ok = true;
    ib_error_t err, *res = NULL;
    long long *pub = NULL;

    if (db_outbox_claim(r->dbc, r->table, r->opt.batch, &rows, &n, &err) != IB_E_OK) {
        IB_LOG(IB_LOG_WARN, "outbox_claim", IB_MSG("the relay cannot claim outbox rows"),
               IB_S("error", err.text), IB_S("sqlstate", err.sqlstate),
               IB_S("error_class", ib_class_name(err.cls)));
        return -1;
    }
    if (n == 0)
        return 0;
    res = calloc(n < GROUP_MAX ? n : GROUP_MAX, sizeof(*res));
    pub = calloc(n, sizeof(*pub));
    if (!res || !pub) {
        ok = false;
        db_end(r->dbc, false, &err);
    }
    for (size_t i = 0; ok && i < n && !transient;) {
        size_t len = group_len(rows, i, n);
        send_group(r, rows + i, len, res);
        ok = mark_group(r, rows, i, len, &n, res, pub, &npub, &handled, &transient);
        if (!ok)
            db_end(r->dbc, false, &err);
        i += len; /* after a transient failure the rest stay pending, untouched */
    }
    ok = ok && finish_round(r, pub, npub);
    db_outbox_rows_free(rows, n);
    free(res);
    free(pub);
    return !ok || transient ? -1 : (int)handled;
}

static void cleanup_turn(rl_relay_t *r)
{
    long long now = ib_mono_ms(), n;
    ib_error_t err;
    if (now < r->next_cleanup_ms)
        return;
    n = db_outbox_cleanup(r->dbc, r->table, r->opt.retention_s, CLEANUP_BATCH,
                          CLEANUP_BATCHES_PER_TURN, &err);
    /* A full turn means more is due: come back soon, between relay rounds. */
    r->next_cleanup_ms =
        now + (n >= (long long)CLEANUP_BATCH * CLEANUP_BATCHES_PER_TURN ? 0 : CLEANUP_EVERY_MS);
    if (n < 0)
        IB_LOG(IB_LOG_WARN, "outbox_cleanup", IB_MSG("outbox cleanup failed"),
               IB_S("error", err.text), IB_S("sqlstate", err.sqlstate));
    else if (n > 0)
        IB_LOG(IB_LOG_INFO, "outbox_cleanup", IB_MSG("published outbox rows deleted"),
               IB_I("rows", n));
}

static void *relay_main(void *arg)
{
    rl_relay_t *r = arg;
    r->next_cleanup_ms = ib_mono_ms() + CLEANUP_FIRST_MS;
    while (!stopping(r)) {
        int got = round_once(r);
        refresh_stats(r, false);
        if (got < 0) {
            long long wait = ib_backoff_ms(BACKOFF_BASE_MS, r->opt.backoff_max_ms, ++r->failures,
                                           &r->seed);
            nap(r, wait < BACKOFF_BASE_MS ? BACKOFF_BASE_MS : wait, false);
            continue;
        }
        r->failures = 0;
        cleanup_turn(r);
        if (got == 0)
            nap(r, r->opt.poll_ms, true);
    }
    return NULL;
}

/* ---- life ---------------------------------------------------------------------- */

static void relay_free(rl_relay_t *r)
{
    if (!r)
        return;
    db_conn_free(r->dbc);
    rl_claim_free(r->claim);
    if (r->curl)
        fx_global_cleanup();
    free(r->table);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* thread: main */
rl_relay_t *rl_relay_start(const rl_relay_options_t *opt, ib_error_t *err)
{
    rl_relay_t *r = calloc(1, sizeof(*r));
    if (!r) {
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    ib_cond_init(&r->cv);
    r->opt = *opt;
    r->table = strdup(opt->table ? opt->table : DB_OUTBOX_DEFAULT_TABLE);
    if (r->opt.batch <= 0)
        r->opt.batch = 100;
    if (r->opt.poll_ms <= 0)
        r->opt.poll_ms = 1000;
    if (r->opt.backoff_max_ms < BACKOFF_BASE_MS)
        r->opt.backoff_max_ms = BACKOFF_BASE_MS;
    if (!r->table) {
        relay_free(r);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
        return NULL;
    }
    if (r->opt.claim.over_bytes > 0) {
        if (fx_global_init(err) != IB_E_OK) {
            relay_free(r);
            return NULL;
        }
        r->curl = true;
        if (!(r->claim = rl_claim_new(&r->opt.claim, err))) {
            relay_free(r);
            return NULL;
        }
    }
    r->dbc = db_conn_new(&opt->db, err);
    if (!r->dbc) {
        relay_free(r);
        return NULL;
    }
    if (pthread_create(&r->tid, NULL, relay_main, r) != 0) {
        relay_free(r);
        ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "cannot start the relay thread");
        return NULL;
    }
    IB_LOG(IB_LOG_INFO, "outbox_relay", IB_MSG("outbox relay started"), IB_S("table", r->table),
           IB_I("poll_ms", r->opt.poll_ms), IB_I("batch", r->opt.batch));
    return r;
}

/* thread: main */
void rl_relay_halt(rl_relay_t *r)
{
    if (!r || r->joined)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->tid, NULL);
    r->joined = true;
}

/* thread: main */
void rl_relay_stop(rl_relay_t *r)
{
    if (!r)
        return;
    rl_relay_halt(r);
    relay_free(r);
}
