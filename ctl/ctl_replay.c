/*
 * ctl_replay.c - `inboxctl dlq replay` (see ctl_replay.h): a snapshot of the
 * dead-letter queue by peek, a peek-lock receiver on it, a blocking sender
 * for the re-sends, and the canary check.
 *
 * thread: everything here runs on the caller's thread except the four
 * sb_client callbacks, which run on the client's proactor thread, touch
 * only the mutex-protected fields of replay_t and return at once.
 */
#include "ctl_replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "ib_log.h"
#include "sb_client.h"
#include "sb_enc.h"
#include "sb_send.h"

#define PEEK_PAGE 100
#define SNAPSHOT_MAX 1000000L
#define SETTLE_WAIT_MS 60000
#define RELEASE_WAIT_MS 5000
#define PROP_COUNT "inboxd-replay-count"
#define PROP_AT "inboxd-replayed-at"

/* One message chosen by the snapshot. */
typedef struct chosen {
    long long seq;
    char *message_id;
    bool done;
} chosen_t;

typedef struct replay {
    const ctl_replay_opts_t *o;
    FILE *out;
    const char *to;    /* where re-sends go */
    const char *watch; /* where a replayed message is consumed from (the canary's view) */
    char dlq[600];
    chosen_t *v;
    size_t n, vcap;
    bool nomem; /* the snapshot could not grow: it is not the whole choice */
    long long unreadable; /* DLQ entries the snapshot's peek could not decode */
    sb_sender_t *snd;
    sb_client_t *cli;

    /* Shared with the proactor thread, under mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sb_msg_t *ring[CTL_REPLAY_HOLD];
    size_t rhead, rlen;
    const sb_msg_t *settling; /* the message whose completion is awaited */
    bool settled;
    ib_error_t settle_res;
    int connected;
    ib_error_t why; /* the client's last reason for being down */
    long releasing; /* releases asked for at the end, not yet answered */

    /* Delivered but not replayed (not chosen, or left by a stop): released at the end. */
    sb_msg_t *untouched[CTL_REPLAY_HOLD];
    size_t nuntouched;

    /* Counts (caller's thread). */
    long replayed, kept, failed, held;
    char **canary_ids;
    long ncanary;
} replay_t;

/* ---- output --------------------------------------------------------------- */

static void emit(replay_t *r, json_t *j)
{
    char *t = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (t) {
        fprintf(r->out, "%s\n", t);
        fflush(r->out);
    }
    free(t);
    json_decref(j);
}

static json_t *jstr(const char *s)
{
    return s ? json_string(s) : json_null();
}

/* ---- options -------------------------------------------------------------- */

static bool is_subscription(const char *entity)
{
    return entity && strstr(entity, "/Subscriptions/") != NULL;
}

const char *ctl_replay_check(const ctl_replay_opts_t *o)
{
    if (!o->connection_string || !*o->connection_string)
        return "no connection string";
    if (!o->entity || !*o->entity)
        return "--entity is required";
    if (strstr(o->entity, "$DeadLetterQueue"))
        return "--entity names the entity, not its dead-letter queue";
    if (is_subscription(o->entity) && (!o->to || !*o->to))
        return "--to is required for a subscription's dead-letter queue (re-sending to the topic "
               "reaches every subscription; name the topic only if that is what you want)";
    if (o->to && is_subscription(o->to))
        return "--to must be a queue or a topic, not a subscription";
    if (o->max < 0 || o->canary < 0 || o->rate < 0)
        return "--max, --canary and --rate take positive numbers";
    return NULL;
}

/* ---- the snapshot --------------------------------------------------------- */

static bool wanted(const ctl_replay_opts_t *o, const sb_msg_t *msg)
{
    if (o->filter && !o->filter(o->filter_ctx, msg))
        return false;
    bool ok = o->nreasons == 0;
    for (size_t i = 0; i < o->nreasons && !ok; i++)
        ok = msg->dead_letter_reason && strcmp(msg->dead_letter_reason, o->reasons[i]) == 0;
    if (!ok)
        return false;
    ok = o->nmessage_ids == 0;
    for (size_t i = 0; i < o->nmessage_ids && !ok; i++)
        ok = msg->message_id && strcmp(msg->message_id, o->message_ids[i]) == 0;
    return ok;
}

static long long prev_count(const sb_msg_t *msg)
{
    const sb_prop_t *p = sb_msg_prop(msg, PROP_COUNT);
    if (!p)
        return 0;
    if (p->type == SB_PROP_INT64)
        return p->i;
    return p->str ? atoll(p->str) : 0;
}

static json_t *msg_line(const sb_msg_t *msg, const char *result)
{
    return json_pack("{s:s, s:o, s:I, s:o, s:I, s:s}", "event", "replay", "message_id",
                     jstr(msg->message_id), "sequence_number", (json_int_t)msg->sequence_number,
                     "dead_letter_reason", jstr(msg->dead_letter_reason), "replay_count",
                     (json_int_t)(prev_count(msg) + 1), "result", result);
}

/*
 * sb_sender_peek_each's callback: adds msg to the snapshot when the filters
 * choose it; false when the snapshot is full (--max, SNAPSHOT_MAX) or
 * cannot grow (r->nomem set: the snapshot is then not to be replayed).
 */
static bool take_one(const sb_msg_t *msg, void *arg)
{
    replay_t *r = arg;
    long limit = r->o->max > 0 && r->o->max < SNAPSHOT_MAX ? r->o->max : SNAPSHOT_MAX;
    if (!wanted(r->o, msg) || !msg->message_id)
        return true;
    if ((long)r->n >= limit)
        return false;
    if (r->n == r->vcap) {
        size_t nc = r->vcap ? r->vcap * 2 : 256;
        chosen_t *nv = realloc(r->v, nc * sizeof(*nv));
        if (!nv) {
            r->nomem = true;
            return false;
        }
        r->v = nv;
        r->vcap = nc;
    }
    char *id = strdup(msg->message_id);
    if (!id) {
        r->nomem = true;
        return false;
    }
    r->v[r->n++] = (chosen_t){msg->sequence_number, id, false};
    if (r->o->dry_run)
        emit(r, msg_line(msg, "would_replay"));
    return true;
}

static int cmp_chosen(const void *a, const void *b)
{
    const chosen_t *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Peeks the whole DLQ once and keeps what the filters choose, in sequence order. */
static int snapshot(replay_t *r)
{
    ib_error_t err;
    if (sb_sender_peek_each(r->snd, r->dlq, 1, PEEK_PAGE, take_one, r, &r->unreadable, &err) !=
        IB_E_OK) {
        fprintf(stderr, "inboxctl: peek of %s failed: %s\n", r->dlq, err.text);
        return -1;
    }
    if (r->unreadable)
        fprintf(stderr, "inboxctl: %lld entr%s of %s could not be decoded: not replayed\n",
                r->unreadable, r->unreadable == 1 ? "y" : "ies", r->dlq);
    if (r->nomem) {
        fprintf(stderr,
                "inboxctl: out of memory after %zu messages of %s's snapshot (not full: "
                "nothing replayed; --max N takes fewer)\n",
                r->n, r->dlq);
        return -1;
    }
    if (r->n)
        qsort(r->v, r->n, sizeof(*r->v), cmp_chosen);
    return 0;
}

static chosen_t *find_chosen(replay_t *r, long long seq)
{
    chosen_t key = {seq, NULL, false};
    if (!r->n)
        return NULL;
    return bsearch(&key, r->v, r->n, sizeof(*r->v), cmp_chosen);
}

/* ---- the receiver's callbacks (thread: proactor) ----------------------------- */

static void on_message(sb_msg_t *msg, void *ctx)
{
    replay_t *r = ctx;
    pthread_mutex_lock(&r->mu);
    /* The client never hands out more than max_concurrent_calls = CTL_REPLAY_HOLD at once. */
    if (r->rlen < CTL_REPLAY_HOLD) {
        r->ring[(r->rhead + r->rlen) % CTL_REPLAY_HOLD] = msg;
        r->rlen++;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

static void on_settled(sb_msg_t *msg, sb_disposition_t d, const ib_error_t *res, void *ctx)
{
    replay_t *r = ctx;
    pthread_mutex_lock(&r->mu);
    if (d == SB_RELEASE && r->releasing > 0) {
        r->releasing--;
        pthread_cond_broadcast(&r->cv);
    } else if (msg == r->settling) {
        r->settled = true;
        r->settle_res = *res;
        r->settling = NULL;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
}

static void on_state(int up, const ib_error_t *why, void *ctx)
{
    replay_t *r = ctx;
    pthread_mutex_lock(&r->mu);
    r->connected = up;
    if (why)
        r->why = *why;
    pthread_mutex_unlock(&r->mu);
}

/* ---- the run ----------------------------------------------------------------- */

static bool interrupted(const replay_t *r)
{
    return r->o->interrupted && *r->o->interrupted;
}

/* Waits up to ms for a delivered message; NULL on timeout. */
static sb_msg_t *next_delivered(replay_t *r, long long ms)
{
    long long until = ib_mono_ms() + ms;
    sb_msg_t *msg = NULL;
    pthread_mutex_lock(&r->mu);
    while (r->rlen == 0 && ib_cond_wait_until(&r->cv, &r->mu, until) == 0)
        ;
    if (r->rlen) {
        msg = r->ring[r->rhead];
        r->rhead = (r->rhead + 1) % CTL_REPLAY_HOLD;
        r->rlen--;
    }
    pthread_mutex_unlock(&r->mu);
    return msg;
}

/*
 * The re-sent copy: the original's identity, its application properties
 * byte for byte (every AMQP type kept: lists, maps, described values, char,
 * uuid, ulong, timestamp...) without the broker's dead-letter fields and an
 * earlier replay's two, then this replay's two.
 */
static const char *const replay_dropped[] = {"DeadLetterReason", "DeadLetterErrorDescription",
                                             PROP_COUNT, PROP_AT};

static ib_err_t send_copy(replay_t *r, const sb_msg_t *msg, ib_error_t *err)
{
    unsigned char *enc = NULL;
    size_t enc_len = 0;
    char at[32];
    ib_err_t rc;
    sb_out_msg_t m;
    sb_prop_t props[2];

    if (msg->props_enc &&
        (rc = sb_enc_map_filter(msg->props_enc, msg->props_enc_len, replay_dropped,
                                sizeof(replay_dropped) / sizeof(replay_dropped[0]), &enc,
                                &enc_len, err)) != IB_E_OK)
        return rc;
    props[0] = (sb_prop_t){.key = PROP_COUNT, .type = SB_PROP_INT64, .i = prev_count(msg) + 1};
    ib_time_rfc3339(at, sizeof(at), ib_now_ms());
    props[1] = (sb_prop_t){.key = PROP_AT, .type = SB_PROP_STRING, .str = at};
    m = (sb_out_msg_t){.correlation_id = msg->correlation_id,
                       .subject = msg->subject,
                       .content_type = msg->content_type,
                       .session_id = msg->session_id,
                       .props_enc = enc,
                       .props_enc_len = enc_len,
                       .props = props,
                       .nprops = 2,
                       .body = msg->body,
                       .body_len = msg->body_len};
    /* The id goes back with its AMQP type, so the inbox sees the same key. */
    unsigned char id_bytes[SB_ID_SCRATCH];
    sb_out_msg_set_id(&m, msg->message_id, id_bytes);
    rc = sb_sender_send(r->snd, r->to, &m, 1, err);
    free(enc);
    return rc;
}

/* Completes the DLQ copy and waits for the broker's answer. */
static bool complete_dlq_copy(replay_t *r, sb_msg_t *msg, ib_error_t *res)
{
    long long until = ib_mono_ms() + SETTLE_WAIT_MS;
    bool ok;
    pthread_mutex_lock(&r->mu);
    r->settling = msg;
    r->settled = false;
    pthread_mutex_unlock(&r->mu);
    sb_client_settle(r->cli, msg, SB_COMPLETE, NULL, NULL);
    pthread_mutex_lock(&r->mu);
    while (!r->settled && ib_mono_ms() < until) {
        pthread_mutex_unlock(&r->mu);
        ib_sleep_ms(10, NULL);
        pthread_mutex_lock(&r->mu);
    }
    ok = r->settled && r->settle_res.code == IB_E_OK;
    if (r->settled)
        *res = r->settle_res;
    else
        ib_error_set(res, IB_E_TIMEOUT, IB_CLASS_TRANSIENT, "no answer to the completion");
    r->settling = NULL;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

/*
 * Re-sends one chosen message, then completes its DLQ copy. Returns false
 * when the re-send failed (the DLQ copy stays; the run stops).
 */
static bool replay_one(replay_t *r, sb_msg_t *msg, chosen_t *c)
{
    ib_error_t err;
    json_t *line;
    ib_err_t rc = send_copy(r, msg, &err);

    if (rc != IB_E_OK && err.cls == IB_CLASS_TRANSIENT) {
        /* One reconnect: a re-send that did land is a duplicate the inbox absorbs. */
        sb_sender_options_t so = {.connection_string = r->o->connection_string,
                                  .ca_file = r->o->ca_file};
        sb_sender_close(r->snd);
        r->snd = sb_sender_open(&so, &err);
        rc = r->snd ? send_copy(r, msg, &err) : IB_E_CLOSED;
    }
    c->done = true;
    if (rc != IB_E_OK) {
        line = msg_line(msg, "send_failed");
        json_object_set_new(line, "error", json_string(err.text));
        emit(r, line);
        r->failed++;
        return false;
    }
    r->replayed++;
    if (r->ncanary < r->o->canary && r->canary_ids)
        r->canary_ids[r->ncanary++] = strdup(msg->message_id);
    line = msg_line(msg, "replayed");
    json_object_set_new(line, "to", json_string(r->to));
    if (!complete_dlq_copy(r, msg, &err)) {
        /* Both copies exist now; a later replay re-sends the same id, which the inbox absorbs. */
        r->kept++;
        json_object_set_new(line, "dlq_copy", json_string("kept"));
        json_object_set_new(line, "error", json_string(err.text));
    }
    emit(r, line);
    return true;
}

/* ---- the canary ------------------------------------------------------------ */

static bool is_canary(const replay_t *r, const char *id)
{
    for (long i = 0; id && i < r->ncanary; i++)
        if (strcmp(r->canary_ids[i], id) == 0)
            return true;
    return false;
}

typedef struct canary_count {
    replay_t *r;
    bool new_only;
    long found;
} canary_count_t;

/* sb_sender_peek_each's callback: counts a canary (new_only: one not in the snapshot). */
static bool count_canary(const sb_msg_t *msg, void *arg)
{
    canary_count_t *cc = arg;
    if (is_canary(cc->r, msg->message_id) &&
        !(cc->new_only && find_chosen(cc->r, msg->sequence_number)))
        cc->found++;
    return true;
}

/*
 * Counts canaries in entity by peek. With new_only, only copies the
 * snapshot did not hold (messages that came back to the DLQ). -1 on failure.
 */
static long count_canaries(replay_t *r, const char *entity, bool new_only)
{
    canary_count_t cc = {r, new_only, 0};
    ib_error_t err;
    long long unreadable;
    if (sb_sender_peek_each(r->snd, entity, 1, PEEK_PAGE, count_canary, &cc, &unreadable, &err) !=
        IB_E_OK) {
        fprintf(stderr, "inboxctl: peek of %s failed: %s\n", entity, err.text);
        return -1;
    }
    if (unreadable)
        fprintf(stderr,
                "inboxctl: %lld entr%s of %s could not be decoded: a canary among them is not "
                "counted\n",
                unreadable, unreadable == 1 ? "y" : "ies", entity);
    return cc.found;
}

/*
 * Waits (bounded) until no canary is left in the watched entity, then looks
 * for canaries back in its DLQ. Returns the exit status to stop with, or 0
 * to go on.
 */
static int canary_check(replay_t *r)
{
    unsigned wait_s = r->o->canary_wait_s ? r->o->canary_wait_s : 60;
    long long until = ib_mono_ms() + (long long)wait_s * 1000;
    char dlq[600];
    long left, back = 0;
    const char *result;

    while ((left = count_canaries(r, r->watch, false)) > 0 && ib_mono_ms() < until &&
           !interrupted(r))
        ib_sleep_ms(500, r->o->interrupted);
    snprintf(dlq, sizeof(dlq), "%s/$DeadLetterQueue", r->watch);
    if (left == 0)
        back = count_canaries(r, dlq, true);
    result = left < 0 || back < 0 ? "error"
             : left > 0           ? "timeout"
             : back > 0           ? "failed"
                                  : "passed";
    emit(r, json_pack("{s:s, s:I, s:I, s:I, s:s, s:s}", "event", "canary", "count",
                      (json_int_t)r->ncanary, "still_in_entity", (json_int_t)(left > 0 ? left : 0),
                      "back_in_dlq", (json_int_t)(back > 0 ? back : 0), "watched", r->watch,
                      "result", result));
    if (left < 0 || back < 0)
        return CTL_REPLAY_FAILED;
    return left > 0 || back > 0 ? CTL_REPLAY_CANARY_FAILED : 0;
}

/* ---- main loop ------------------------------------------------------------- */

static int start_receiver(replay_t *r)
{
    ib_error_t err;
    sb_options_t so = {.connection_string = r->o->connection_string,
                       .entity = r->dlq,
                       .prefetch = 0,
                       .max_concurrent_calls = CTL_REPLAY_HOLD,
                       .max_auto_lock_renewal_s = 3600,
                       .reconnect_max_ms = 5000,
                       .ca_file = r->o->ca_file};
    sb_callbacks_t cb = {.on_message = on_message,
                         .on_settled = on_settled,
                         .on_state = on_state,
                         .ctx = r};
    r->cli = sb_client_new(&so, &cb, &err);
    if (!r->cli || sb_client_start(r->cli) != IB_E_OK) {
        fprintf(stderr, "inboxctl: cannot receive from %s: %s\n", r->dlq,
                r->cli ? "client did not start" : err.text);
        return -1;
    }
    return 0;
}

static size_t remaining(const replay_t *r)
{
    size_t left = 0;
    for (size_t i = 0; i < r->n; i++)
        left += !r->v[i].done;
    return left;
}

/* Holds a delivered message the run does not replay, to release it at the end. */
static void keep_untouched(replay_t *r, sb_msg_t *msg)
{
    r->held++;
    /* The client hands out at most CTL_REPLAY_HOLD unsettled messages at once. */
    if (r->nuntouched < CTL_REPLAY_HOLD)
        r->untouched[r->nuntouched++] = msg;
}

/* Receives and replays until the snapshot is done; returns the stop reason. */
static const char *replay_loop(replay_t *r, int *status)
{
    unsigned idle_s = r->o->idle_s ? r->o->idle_s : 30;
    long long last = ib_mono_ms(), start = ib_mono_ms();
    size_t left = r->n;

    while (left > 0) {
        sb_msg_t *msg;
        chosen_t *c;
        if (interrupted(r)) {
            *status = CTL_REPLAY_INTERRUPTED;
            return "interrupted";
        }
        msg = next_delivered(r, 100);
        if (!msg) {
            if (ib_mono_ms() - last > (long long)idle_s * 1000) {
                *status = CTL_REPLAY_FAILED;
                return "idle";
            }
            continue;
        }
        c = find_chosen(r, msg->sequence_number);
        if (!c || c->done || !msg->message_id || strcmp(c->message_id, msg->message_id) != 0) {
            keep_untouched(r, msg); /* not ours: released unchanged when the run ends */
            continue;
        }
        if (r->o->rate > 0) {
            long long due = start + (long long)((double)r->replayed * 1000.0 / r->o->rate);
            while (ib_mono_ms() < due && !interrupted(r))
                ib_sleep_ms(due - ib_mono_ms(), r->o->interrupted);
        }
        if (!replay_one(r, msg, c)) {
            *status = CTL_REPLAY_FAILED;
            return "send_failed";
        }
        left--;
        last = ib_mono_ms();
        if (r->o->canary > 0 && r->replayed == r->o->canary) {
            int st = canary_check(r);
            if (st) {
                *status = st;
                return "canary";
            }
            start = ib_mono_ms() - (long long)((double)r->replayed * 1000.0 /
                                               (r->o->rate > 0 ? r->o->rate : 1e9));
            last = ib_mono_ms();
        }
    }
    /* Fewer chosen than --canary: the canary check covers all of them. */
    if (r->o->canary > 0 && r->replayed > 0 && r->replayed < r->o->canary) {
        int st = canary_check(r);
        if (st) {
            *status = st;
            return "canary";
        }
    }
    *status = CTL_REPLAY_OK;
    return r->o->max > 0 && (long)r->n == r->o->max ? "max" : "done";
}

static void summary(replay_t *r, const char *stopped, int status)
{
    json_t *j = json_pack("{s:s, s:s, s:s, s:b, s:I, s:I, s:I, s:I, s:I, s:s, s:i}", "event",
                          "summary", "entity", r->o->entity, "to", r->to, "dry_run",
                          r->o->dry_run, "chosen", (json_int_t)r->n, "replayed",
                          (json_int_t)r->replayed, "dlq_copies_kept", (json_int_t)r->kept,
                          "failed", (json_int_t)r->failed, "remaining",
                          (json_int_t)(r->o->dry_run ? r->n : remaining(r)), "stopped", stopped,
                          "exit", status);
    if (status == CTL_REPLAY_FAILED && !r->connected && r->why.code != IB_E_OK)
        json_object_set_new(j, "error", json_string(r->why.text));
    if (r->unreadable) /* never chosen, never replayed: the filters cannot read them */
        json_object_set_new(j, "unreadable", json_integer(r->unreadable));
    if (!r->o->dry_run && remaining(r) > 0) {
        char left[900];
        snprintf(left, sizeof left,
                 "%zu chosen dead letter%s not replayed: left untouched in %s (not re-sent, not "
                 "completed, no delivery counted); run the same command again to move only them",
                 remaining(r), remaining(r) == 1 ? "" : "s", r->dlq);
        json_object_set_new(j, "left", json_string(left));
    }
    emit(r, j);
}

/*
 * Gives back every message delivered and not replayed, unchanged (a release
 * counts no delivery), and waits up to RELEASE_WAIT_MS for the broker's
 * answers: each is a settlement like the replayed ones', not a message the
 * client had to drop at its stop.
 */
static void release_untouched(replay_t *r)
{
    long long until = ib_mono_ms() + RELEASE_WAIT_MS;
    pthread_mutex_lock(&r->mu);
    r->releasing = (long)r->nuntouched;
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < r->nuntouched; i++)
        sb_client_settle(r->cli, r->untouched[i], SB_RELEASE, NULL, NULL);
    r->nuntouched = 0;
    pthread_mutex_lock(&r->mu);
    while (r->releasing > 0 && ib_cond_wait_until(&r->cv, &r->mu, until) == 0)
        ;
    pthread_mutex_unlock(&r->mu);
}

/*
 * Stops receiving and lets the drain finish before the held messages are
 * released: a release while the link still has credit would hand them
 * straight back to this closing link, where they would stay locked until
 * their locks expire. The broker answers the drain within a round trip;
 * half a second with nothing new delivered is taken as its answer (if it
 * comes later, the only cost is that delay plus one delivery count).
 */
static void stop_receiver(replay_t *r)
{
    long long until = ib_mono_ms() + 5000;
    sb_msg_t *msg;
    sb_client_stop_receiving(r->cli);
    while (ib_mono_ms() < until && (msg = next_delivered(r, 500)) != NULL)
        keep_untouched(r, msg);
    release_untouched(r);
    sb_client_stop(r->cli); /* anything still held (a release unanswered) goes back too */
}

static void replay_free(replay_t *r)
{
    if (r->cli) {
        stop_receiver(r);
        sb_client_free(r->cli);
    }
    if (r->snd)
        sb_sender_close(r->snd);
    for (size_t i = 0; i < r->n; i++)
        free(r->v[i].message_id);
    free(r->v);
    for (long i = 0; i < r->ncanary; i++)
        free(r->canary_ids[i]);
    free(r->canary_ids);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
}

int ctl_replay_run(const ctl_replay_opts_t *o)
{
    replay_t r;
    ib_error_t err;
    sb_sender_options_t so = {.connection_string = o->connection_string, .ca_file = o->ca_file};
    const char *stopped = "done";
    int status = CTL_REPLAY_OK;

    memset(&r, 0, sizeof(r));
    r.o = o;
    r.out = o->out ? o->out : stdout;
    r.to = o->to && *o->to ? o->to : o->entity;
    /* Sent to the topic of the subscription read: consumed from that subscription. */
    r.watch = is_subscription(o->entity) && strncmp(o->entity, r.to, strlen(r.to)) == 0 &&
                      o->entity[strlen(r.to)] == '/'
                  ? o->entity
                  : r.to;
    snprintf(r.dlq, sizeof(r.dlq), "%s/$DeadLetterQueue", o->entity);
    pthread_mutex_init(&r.mu, NULL);
    ib_cond_init(&r.cv);
    if (o->canary > 0)
        r.canary_ids = calloc((size_t)o->canary, sizeof(char *));

    r.snd = sb_sender_open(&so, &err);
    if (!r.snd) {
        fprintf(stderr, "inboxctl: cannot connect: %s\n", err.text);
        replay_free(&r);
        return CTL_REPLAY_FAILED;
    }
    if (snapshot(&r) != 0) {
        stopped = "error";
        status = CTL_REPLAY_FAILED;
    } else if (!o->dry_run && r.n > 0) {
        if (start_receiver(&r) != 0) {
            stopped = "error";
            status = CTL_REPLAY_FAILED;
        } else {
            stopped = replay_loop(&r, &status);
        }
    }
    summary(&r, stopped, status);
    replay_free(&r);
    return status;
}
