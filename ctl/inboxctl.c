/*
 * inboxctl - an operator's tool speaking real AMQP to any Service Bus:
 *
 *   inboxctl send  [--entity E] [--message-id ID] [--subject S] [--session-id S]
 *                  [--correlation-id C] [--content-type T] [--prop K=V]... [--prop-int K=N]...
 *                  (--body TEXT | --body-file F | --file MESSAGES.jsonl)
 *   inboxctl peek  [--entity E] [--dlq] [--max N]
 *   inboxctl dlq list [--entity E] [--max N]
 *   inboxctl dlq stats [--entity E] [--json]     (ctl_dlq_stats.c)
 *   inboxctl dlq replay [--entity E] [--reason R]... [--message-id M]... [--group G] [--max N]
 *                  [--rate PER_S] [--canary K] [--canary-wait S] [--dry-run] [--to ENTITY]
 *   inboxctl inbox list --status S [--consumer C] / inbox resolve ... (ctl_inbox.c)
 *   inboxctl outbox list [--status pending|published|failed] [--max N] --config F
 *   inboxctl outbox retry --id N --config F        (the database, see ctl_outbox.c)
 *   inboxctl outbox skip --id N [--note TEXT] --config F
 *   inboxctl outbox republish [--since TIME] --config F
 *   inboxctl session show|unpark --session S [--entity E] [--wait S]  (ctl_session.c)
 *   inboxctl status --config F [--metrics URL] [--stuck-after S] [--json]  (ctl_status.c)
 *   inboxctl blob show|fetch --message-id M [--dlq] [--out FILE] --config F  (ctl_blob.c)
 *
 * The connection string comes from --connection-string, else
 * INBOXD_SERVICEBUS_CONNECTION_STRING, else --config FILE (the same file
 * inboxd reads); the entity from --entity, else the config, else EntityPath.
 * A line of --file is {"message_id":..,"subject":..,"session_id":..,
 * "correlation_id":..,"content_type":..,"properties":{..},"body": text or JSON,
 * "scheduled_in_s": N (optional: the broker enqueues it N seconds from now)}.
 * Its properties are taken by the relay's rule (sb_out_props_from_json):
 * an array or object value is refused naming the line and key, exit 2, and
 * the lines read since the last chunk of SEND_CHUNK sent are not sent.
 * peek and dlq list print one JSON object per message on stdout; dlq replay
 * (ctl/ctl_replay.c) one per message moved and a summary. Entries the peek
 * cannot decode are paged past and counted: peek and dlq list say how many
 * on stderr and exit 1, dlq stats shows them as "unreadable", dlq replay's
 * summary as "unreadable" (never replayed).
 *
 * Exit status: 0 success, 1 broker or I/O failure, 2 usage; dlq replay also
 * 3 when a canary came back to the dead-letter queue and 130 after SIGINT;
 * session unpark 4 when the session was not parked.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ib_enc.h"
#include "ib_log.h"
#include "ib_utf8.h"
#include "ctl_blob.h"
#include "ctl_outbox.h"
#include "ctl_session.h"
#include "ctl_status.h"
#include "sb_connstr.h"
#include "sb_send.h"
#include "wk_config.h"
#include "ctl_inbox.h"
#include "ctl_dlq_stats.h"
#include "ctl_replay.h"

#define SEND_CHUNK 200
#define MAX_PROPS 32
#define MAX_FILTERS 64

typedef struct opts {
    const char *cs, *entity, *config;
    const char *message_id, *subject, *session_id, *correlation_id, *content_type;
    const char *body, *body_file, *file;
    sb_prop_t props[MAX_PROPS];
    size_t nprops;
    bool dlq;
    int max;
    /* dlq replay */
    bool replay, dry_run, max_set;
    bool stats, json; /* dlq stats */
    const char *to, *group;
    const char *reasons[MAX_FILTERS], *message_ids[MAX_FILTERS];
    size_t nreasons, nmessage_ids;
    double rate;
    long canary, canary_wait_s;
    const char *session_cmd; /* session show|unpark */
    const char *blob_cmd;    /* blob show|fetch */
    const char *out;         /* blob fetch: the file */
    long wait_s;             /* session: how long a session locked by a receiver is waited for */
} opts_t;

static int usage(const char *why)
{
    fprintf(
        stderr,
        "inboxctl: %s\n"
        "usage: inboxctl send [--entity E] [--message-id ID] [--subject S] [--session-id S]\n"
        "                     [--correlation-id C] [--content-type T] [--prop K=V]...\n"
        "                     [--prop-int K=N]... (--body TEXT | --body-file F | --file F.jsonl)\n"
        "       inboxctl peek [--entity E] [--dlq] [--max N]\n"
        "       inboxctl dlq list [--entity E] [--max N]\n"
        "       inboxctl dlq stats [--entity E] [--json]\n"
        "         Groups the dead letters (peeked, nothing locked or moved) by reason, error\n"
        "         class, route, SQLSTATE/native code and first line of the description.\n"
        "       inboxctl dlq replay [--entity E] [--reason R]... [--message-id M]... [--group G]\n"
        "                     [--max N]\n"
        "                     [--rate PER_S] [--canary K] [--canary-wait S] [--dry-run]\n"
        "                     [--to ENTITY]\n"
        "         Moves dead-lettered messages back (peek-lock; the DLQ copy is completed only\n"
        "         after the re-send is accepted), keeping message id, body and properties and\n"
        "         adding inboxd-replay-count and inboxd-replayed-at. --rate defaults to 10/s\n"
        "         (0: unlimited). --canary K replays K, waits until they leave the entity\n"
        "         (--canary-wait, default 60 s) and exits 3 if any came back to the DLQ.\n"
        "         A subscription's DLQ needs --to: re-sending to the topic reaches EVERY\n"
        "         subscription of it; a queue of your own only the consumer reading it.\n"
        "         --group G replays one group of dlq stats; run again after an interruption,\n"
        "         it moves only what is left (what moved is no longer in the DLQ).\n"
        "       inboxctl inbox list|resolve ... (inboxctl inbox for its usage)\n"
        "       inboxctl outbox list [--status pending|published|failed] [--max N] --config F\n"
        "       inboxctl outbox retry --id N --config F\n"
        "       inboxctl outbox skip --id N [--note TEXT] --config F\n"
        "       inboxctl outbox republish [--since TIME|15m] --config F\n"
        "       inboxctl session show|unpark --session S [--entity E] [--wait SECONDS]\n"
        "         Reads a session's state; unpark clears the parked record inboxd left there\n"
        "         (servicebus.session_on_dead_letter park), so its later messages flow again.\n"
        "         Exits 4 when it was not parked. A session inboxd holds is waited for\n"
        "         (--wait, default 120 s). Replay its dead letter first to keep the order.\n"
        "       inboxctl status --config F [--metrics URL] [--stuck-after SECONDS] [--json]\n"
        "         One screen: healthy (exit 0), degraded (3) or stuck (4), each finding named\n"
        "         with the command that shows more.\n"
        "       inboxctl blob show|fetch --message-id M [--dlq] [--out FILE] --config F\n"
        "         A claim-checked message's blob reference as its route binds it (peeked;\n"
        "         the URL without its query); fetch gets the blob as inboxd would (the\n"
        "         route's auth, max_bytes, ETag and SHA-256) into --out. Exits 3 when the\n"
        "         message is not there.\n"
        "common: --connection-string CS (or INBOXD_SERVICEBUS_CONNECTION_STRING) | --config F\n",
        why);
    return 2;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    char *buf = NULL;
    size_t cap = 0, n = 0;
    if (!fp)
        return NULL;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = (n + 65536 + 1) * 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return NULL;
            }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, 65536, fp);
        n += r;
        if (r == 0)
            break;
    }
    fclose(fp);
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* Resolves the connection string and entity; the config strings stay in cfg. */
static int resolve(opts_t *o, wk_config_t *cfg, bool *have_cfg)
{
    *have_cfg = false;
    if (!o->cs)
        o->cs = getenv("INBOXD_SERVICEBUS_CONNECTION_STRING");
    if ((!o->cs || !o->entity) && o->config) {
        /* inboxctl needs only two keys; inboxd --check-config judges the rest. */
        bool read = wk_config_load_file(cfg, o->config, stderr);
        *have_cfg = true;
        if (!read)
            return 2;
        if (!o->cs && cfg->servicebus.connection_string[0])
            o->cs = cfg->servicebus.connection_string;
        if (!o->entity && cfg->servicebus.entity[0])
            o->entity = cfg->servicebus.entity;
    }
    wk_config_transport_apply(*have_cfg ? cfg : NULL);
    if (!o->cs || !*o->cs)
        return usage("no connection string (--connection-string, "
                     "INBOXD_SERVICEBUS_CONNECTION_STRING or --config)");
    if (!o->entity) {
        sb_connstr_t cs;
        ib_error_t err;
        if (sb_connstr_parse(o->cs, &cs, &err) != IB_E_OK) {
            fprintf(stderr, "inboxctl: %s\n", err.text);
            return 2;
        }
        if (cs.entity_path) {
            static char entity[256];
            ib_strlcpy(entity, cs.entity_path, sizeof(entity));
            o->entity = entity;
        }
        sb_connstr_free(&cs);
    }
    if (!o->entity)
        return usage("no entity (--entity, the config, or EntityPath)");
    return 0;
}

static bool add_prop(opts_t *o, const char *kv, bool integer)
{
    const char *eq = strchr(kv, '=');
    sb_prop_t *p;
    if (!eq || eq == kv || o->nprops == MAX_PROPS)
        return false;
    p = &o->props[o->nprops++];
    memset(p, 0, sizeof(*p));
    p->key = strndup(kv, (size_t)(eq - kv));
    if (integer) {
        char *end;
        errno = 0;
        p->i = strtoll(eq + 1, &end, 10);
        if (errno || *end || !eq[1])
            return false;
        p->type = SB_PROP_INT64;
    } else {
        p->type = SB_PROP_STRING;
        p->str = strdup(eq + 1);
    }
    return true;
}

/*
 * Fills m from one JSON line; strings point into j (kept alive by the
 * caller). False with why (a static text, or err's) when the line is not a
 * message object.
 */
static bool msg_from_json(json_t *j, sb_out_msg_t *m, sb_prop_t *props, char **body_text,
                          ib_error_t *err)
{
    json_t *body, *pr;

    memset(m, 0, sizeof(*m));
    if (!json_is_object(j)) {
        ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT, "not a message object");
        return false;
    }
    m->message_id = json_string_value(json_object_get(j, "message_id"));
    m->subject = json_string_value(json_object_get(j, "subject"));
    m->session_id = json_string_value(json_object_get(j, "session_id"));
    m->correlation_id = json_string_value(json_object_get(j, "correlation_id"));
    m->content_type = json_string_value(json_object_get(j, "content_type"));
    /* Scheduled: the broker enqueues it this many seconds from now. */
    json_t *sched = json_object_get(j, "scheduled_in_s");
    if (sched && !json_is_integer(sched)) {
        ib_error_set(err, IB_E_INVALID_JSON, IB_CLASS_PERMANENT,
                     "scheduled_in_s is not an integer");
        return false;
    }
    if (sched && json_integer_value(sched) > 0)
        m->scheduled_ms = ib_now_ms() + json_integer_value(sched) * 1000;
    pr = json_object_get(j, "properties");
    m->props = props;
    if (pr && sb_out_props_from_json(pr, props, MAX_PROPS, &m->nprops, err) != IB_E_OK)
        return false;
    body = json_object_get(j, "body");
    if (json_is_string(body)) {
        m->body = json_string_value(body);
        m->body_len = json_string_length(body);
    } else if (body) {
        *body_text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        m->body = *body_text;
        m->body_len = *body_text ? strlen(*body_text) : 0;
    }
    return true;
}

/*
 * Sends the n messages of ms, each once the broker accepted it: after a
 * transient failure the connection is reopened and only the messages
 * without an accept are sent again (one whose answer was lost may then
 * arrive twice, which is what the consumer's inbox is for; a lost one
 * would not be). ms is reordered. 0, or 1 after a failure it printed.
 */
static int send_chunk(sb_sender_t **s, const sb_sender_options_t *so, const char *entity,
                      sb_out_msg_t *ms, size_t n, size_t total)
{
    ib_error_t each[SEND_CHUNK], err;
    int tries = 0;
    while (n > 0 && sb_sender_send_each(*s, entity, ms, n, each) != IB_E_OK) {
        size_t left = 0;
        const ib_error_t *why = NULL;
        for (size_t i = 0; i < n; i++) {
            if (each[i].code == IB_E_OK)
                continue;
            if (!why || (why->cls == IB_CLASS_TRANSIENT && each[i].cls != IB_CLASS_TRANSIENT))
                why = &each[i];
            ms[left++] = ms[i];
        }
        total += n - left;
        n = left;
        if (!why || why->cls != IB_CLASS_TRANSIENT || ++tries > 5) {
            fprintf(stderr, "inboxctl: send failed after %zu messages: %s\n", total,
                    why ? why->text : "no answer");
            return 1;
        }
        fprintf(stderr, "inboxctl: %s; reconnecting and sending the %zu not accepted again\n",
                why->text, n);
        sb_sender_close(*s);
        if (!(*s = sb_sender_open(so, &err))) {
            fprintf(stderr, "inboxctl: cannot reconnect: %s\n", err.text);
            return 1;
        }
    }
    return 0;
}

static int send_file(sb_sender_t **s, const sb_sender_options_t *so, const opts_t *o)
{
    FILE *fp = strcmp(o->file, "-") == 0 ? stdin : fopen(o->file, "r");
    char *line = NULL;
    size_t cap = 0, total = 0;
    ssize_t len;
    int rc = 0;
    json_t *js[SEND_CHUNK];
    sb_out_msg_t ms[SEND_CHUNK];
    static sb_prop_t props[SEND_CHUNK][MAX_PROPS];
    char *bodies[SEND_CHUNK];
    size_t n = 0, lineno = 0;

    if (!fp) {
        fprintf(stderr, "inboxctl: %s: %s\n", o->file, strerror(errno));
        return 1;
    }
    for (;;) {
        len = getline(&line, &cap, fp);
        if (len > 0) {
            json_error_t jerr;
            lineno++;
            if (strspn(line, " \t\r\n") == (size_t)len)
                continue;
            ib_error_t why;
            js[n] = json_loads(line, 0, &jerr);
            bodies[n] = NULL;
            if (!js[n] || !msg_from_json(js[n], &ms[n], props[n], &bodies[n], &why)) {
                fprintf(stderr, "inboxctl: %s:%zu: %s%s\n", o->file, lineno,
                        js[n] ? "" : "not a message object: ", js[n] ? why.text : jerr.text);
                json_decref(js[n]);
                free(bodies[n]);
                rc = 2;
                break;
            }
            n++;
        }
        if (n == SEND_CHUNK || (len < 0 && n)) {
            rc = send_chunk(s, so, o->entity, ms, n, total);
            if (rc == 0)
                total += n;
            for (size_t i = 0; i < n; i++) {
                json_decref(js[i]);
                free(bodies[i]);
            }
            n = 0;
            if (rc)
                break;
        }
        if (len < 0)
            break;
    }
    for (size_t i = 0; i < n; i++) {
        json_decref(js[i]);
        free(bodies[i]);
    }
    free(line);
    if (fp != stdin)
        fclose(fp);
    if (rc == 0)
        fprintf(stderr, "inboxctl: sent %zu messages to %s\n", total, o->entity);
    return rc;
}

static int cmd_send(sb_sender_t **s, const sb_sender_options_t *so, const opts_t *o)
{
    sb_out_msg_t m;
    char *buf = NULL;
    size_t len = 0;
    ib_error_t err;
    ib_err_t rc;

    if (o->file)
        return send_file(s, so, o);
    memset(&m, 0, sizeof(m));
    if (o->body_file) {
        buf = read_file(o->body_file, &len);
        if (!buf) {
            fprintf(stderr, "inboxctl: %s: %s\n", o->body_file, strerror(errno));
            return 1;
        }
        m.body = buf;
        m.body_len = len;
    } else {
        m.body = o->body;
        m.body_len = strlen(o->body);
    }
    m.message_id = o->message_id;
    m.subject = o->subject;
    m.session_id = o->session_id;
    m.correlation_id = o->correlation_id;
    m.content_type = o->content_type;
    m.props = o->props;
    m.nprops = o->nprops;
    rc = sb_sender_send(*s, o->entity, &m, 1, &err);
    free(buf);
    if (rc != IB_E_OK) {
        fprintf(stderr, "inboxctl: send failed: %s\n", err.text);
        return 1;
    }
    return 0;
}

/*
 * A JSON string of text that may not be UTF-8: bytes outside well-formed
 * sequences become U+FFFD, so every message can be shown. NULL -> null.
 */
static json_t *text_json(const char *s)
{
    size_t cap;
    char *buf;
    json_t *j;
    if (!s)
        return json_null();
    if (ib_utf8_valid(s, strlen(s)))
        return json_string(s);
    cap = strlen(s) * 3 + 1;
    buf = malloc(cap);
    if (!buf)
        return json_null();
    ib_utf8_sanitize(buf, cap, s);
    j = json_string(buf);
    free(buf);
    return j;
}

static json_t *prop_json(const sb_prop_t *p)
{
    switch (p->type) {
    case SB_PROP_INT64:
        return json_integer(p->i);
    case SB_PROP_DOUBLE:
        return json_real(p->d);
    case SB_PROP_BOOL:
        return json_boolean(p->i);
    case SB_PROP_NULL:
        return json_null();
    default:
        return text_json(p->str ? p->str : "");
    }
}

/* The body as text when it is UTF-8, else as body_hex. */
static void body_json(json_t *j, const sb_msg_t *m)
{
    char *hex;
    if (ib_utf8_valid((const char *)m->body, m->body_len) && !memchr(m->body, '\0', m->body_len)) {
        json_object_set_new(j, "body", json_stringn((const char *)m->body, m->body_len));
        return;
    }
    hex = malloc(m->body_len * 2 + 1);
    if (!hex)
        return;
    ib_enc_hex(hex, m->body, m->body_len);
    json_object_set_new(j, "body", json_null());
    json_object_set_new(j, "body_hex", json_stringn(hex, m->body_len * 2));
    free(hex);
}

static json_t *msg_json(const sb_msg_t *m)
{
    json_t *j = json_object(), *props = json_object();
    json_object_set_new(j, "message_id", text_json(m->message_id));
    json_object_set_new(j, "subject", text_json(m->subject));
    json_object_set_new(j, "session_id", text_json(m->session_id));
    json_object_set_new(j, "correlation_id", text_json(m->correlation_id));
    json_object_set_new(j, "sequence_number", json_integer(m->sequence_number));
    json_object_set_new(j, "delivery_count", json_integer(m->delivery_count));
    if (m->dead_letter_reason)
        json_object_set_new(j, "dead_letter_reason", text_json(m->dead_letter_reason));
    if (m->dead_letter_description)
        json_object_set_new(j, "dead_letter_description", text_json(m->dead_letter_description));
    /* Shown rather than skipped: e.g. more properties than inboxd keeps. */
    if (m->decode_err.code != IB_E_OK)
        json_object_set_new(j, "decode_error", text_json(m->decode_err.text));
    for (size_t i = 0; i < m->nprops; i++) {
        json_t *key = text_json(m->props[i].key);
        json_object_set_new(props, json_string_value(key), prop_json(&m->props[i]));
        json_decref(key);
    }
    json_object_set_new(j, "properties", props);
    body_json(j, m);
    return j;
}

typedef struct peek_print {
    int max, printed;
} peek_print_t;

/* sb_sender_peek_each's callback: prints one message as a JSON line, up to max. */
static bool print_peeked(const sb_msg_t *m, void *arg)
{
    peek_print_t *pp = arg;
    json_t *j = msg_json(m);
    char *t = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (t)
        printf("%s\n", t);
    else /* never skip a message silently */
        printf("{\"sequence_number\":%lld,\"error\":\"cannot be shown\"}\n", m->sequence_number);
    free(t);
    json_decref(j);
    return ++pp->printed < pp->max;
}

static int cmd_peek(sb_sender_t *s, const opts_t *o)
{
    char entity[600];
    peek_print_t pp = {o->max, 0};
    ib_error_t err;
    long long unreadable = 0;

    snprintf(entity, sizeof(entity), "%s%s", o->entity, o->dlq ? "/$DeadLetterQueue" : "");
    if (o->max <= 0)
        return 0;
    if (sb_sender_peek_each(s, entity, 1, o->max < 100 ? o->max : 100, print_peeked, &pp,
                            &unreadable, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: peek failed: %s\n", err.text);
        return 1;
    }
    if (unreadable) { /* never skip silently: not everything was shown */
        fprintf(stderr, "inboxctl: %lld entr%s of %s could not be decoded (not shown)\n",
                unreadable, unreadable == 1 ? "y" : "ies", entity);
        return 1;
    }
    return 0;
}

/*
 * The options only dlq replay takes. Returns how many argv entries it used
 * (1 or 2), 0 when a is not one of them, -1 after a usage error.
 */
static int replay_arg(opts_t *o, const char *a, const char *v)
{
    char *end;
    if (strcmp(a, "--dry-run") == 0) {
        o->dry_run = true;
        return 1;
    }
    if (strcmp(a, "--reason") != 0 && strcmp(a, "--message-id") != 0 && strcmp(a, "--to") != 0 &&
        strcmp(a, "--rate") != 0 && strcmp(a, "--canary") != 0 && strcmp(a, "--canary-wait") != 0 &&
        strcmp(a, "--group") != 0)
        return 0;
    if (!v) {
        usage("a replay option needs a value");
        return -1;
    }
    if (strcmp(a, "--reason") == 0 || strcmp(a, "--message-id") == 0) {
        bool reason = a[2] == 'r';
        size_t *n = reason ? &o->nreasons : &o->nmessage_ids;
        if (*n == MAX_FILTERS) {
            usage("at most 64 --reason and 64 --message-id");
            return -1;
        }
        (reason ? o->reasons : o->message_ids)[(*n)++] = v;
        return 2;
    }
    if (strcmp(a, "--to") == 0 || strcmp(a, "--group") == 0) {
        *(a[2] == 't' ? &o->to : &o->group) = v;
        return 2;
    }
    errno = 0;
    if (strcmp(a, "--rate") == 0) {
        o->rate = strtod(v, &end);
        if (errno || *end || end == v || o->rate < 0) {
            usage("--rate takes messages per second (0: unlimited)");
            return -1;
        }
        return 2;
    }
    long n = strtol(v, &end, 10);
    if (errno || *end || end == v || n <= 0 || n > 1000000) {
        usage(strcmp(a, "--canary") == 0 ? "--canary takes a positive count"
                                         : "--canary-wait takes positive seconds");
        return -1;
    }
    if (strcmp(a, "--canary") == 0)
        o->canary = n;
    else
        o->canary_wait_s = n;
    return 2;
}

static volatile sig_atomic_t replay_interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    replay_interrupted = 1;
}

static int cmd_replay(const opts_t *o, const char *ca_file)
{
    struct sigaction sa;
    ctl_replay_opts_t ro = {.connection_string = o->cs,
                           .ca_file = ca_file,
                           .entity = o->entity,
                           .to = o->to,
                           .reasons = (const char **)o->reasons,
                           .nreasons = o->nreasons,
                           .message_ids = (const char **)o->message_ids,
                           .nmessage_ids = o->nmessage_ids,
                           .filter = o->group ? ctl_dlq_group_filter : NULL,
                           .filter_ctx = (void *)o->group,
                           .max = o->max_set ? o->max : 0,
                           .rate = o->rate,
                           .canary = o->canary,
                           .canary_wait_s = (unsigned)o->canary_wait_s,
                           .dry_run = o->dry_run,
                           .interrupted = &replay_interrupted};
    const char *why = ctl_replay_check(&ro);
    if (why)
        return usage(why);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigint; /* no SA_RESTART: a wait returns and sees the flag */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    return ctl_replay_run(&ro);
}

/* The options of send, peek and dlq from argv[first]: 0, or the exit status of a usage error. */
static int parse_args(opts_t *o, int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(name, field)                                                                           \
    if (strcmp(a, name) == 0) {                                                                    \
        if (!v)                                                                                    \
            return usage(name " needs a value");                                                   \
        o->field = v;                                                                              \
        i++;                                                                                       \
        continue;                                                                                  \
    }
        if (o->replay) {
            int r = replay_arg(o, a, v);
            if (r < 0)
                return 2;
            if (r > 0) {
                i += r - 1;
                continue;
            }
        }
        OPT("--connection-string", cs)
        OPT("--entity", entity)
        OPT("--config", config)
        OPT("--message-id", message_id)
        OPT("--subject", subject)
        OPT("--session-id", session_id)
        OPT("--session", session_id)
        OPT("--correlation-id", correlation_id)
        OPT("--content-type", content_type)
        OPT("--body", body)
        OPT("--body-file", body_file)
        OPT("--file", file)
        OPT("--out", out)
#undef OPT
        if (strcmp(a, "--dlq") == 0) {
            o->dlq = true;
        } else if (o->stats && strcmp(a, "--json") == 0) {
            o->json = true;
        } else if ((strcmp(a, "--prop") == 0 || strcmp(a, "--prop-int") == 0) && v) {
            if (!add_prop(o, v, strcmp(a, "--prop-int") == 0))
                return usage("--prop takes KEY=VALUE (--prop-int KEY=INTEGER)");
            i++;
        } else if (o->session_cmd && strcmp(a, "--wait") == 0 && v) {
            char *end;
            o->wait_s = strtol(v, &end, 10);
            if (*end || o->wait_s < 0)
                return usage("--wait takes seconds");
            i++;
        } else if (strcmp(a, "--max") == 0 && v) {
            o->max = atoi(v);
            if (o->max <= 0)
                return usage("--max takes a positive number");
            o->max_set = true;
            i++;
        } else {
            char why[300];
            snprintf(why, sizeof(why), "unknown or incomplete argument '%s'", a);
            return usage(why);
        }
    }
    return 0;
}

/* Connects and runs send, peek or dlq; the exit status. */
static int run_broker_cmd(const char *cmd, opts_t *o)
{
    wk_config_t cfg;
    bool have_cfg = false;
    ib_error_t err;
    int rc = resolve(o, &cfg, &have_cfg);
    if (rc == 0 && o->blob_cmd && !have_cfg) { /* its routes are the config's */
        have_cfg = true;
        if (!wk_config_load_file(&cfg, o->config, stderr))
            rc = 2;
    }
    if (rc == 0) {
        sb_sender_options_t so = {.connection_string = o->cs};
        if (have_cfg && cfg.servicebus.ca_file[0])
            so.ca_file = cfg.servicebus.ca_file;
        sb_sender_t *s = sb_sender_open(&so, &err);
        if (!s) {
            fprintf(stderr, "inboxctl: cannot connect: %s\n", err.text);
            rc = 1;
        } else {
            ctl_blob_opts_t bo = {o->entity, o->dlq, o->message_id,
                                  o->blob_cmd && strcmp(o->blob_cmd, "fetch") == 0, o->out};
            rc = o->blob_cmd ? ctl_blob(s, &cfg, &bo)
                 : o->session_cmd
                     ? ctl_session(s, o->entity, o->session_id,
                                        strcmp(o->session_cmd, "unpark") == 0, o->wait_s)
                 : o->replay                ? cmd_replay(o, so.ca_file)
                 : o->stats                 ? ctl_dlq_stats_run(s, o->entity, o->json, stdout)
                 : strcmp(cmd, "send") == 0 ? cmd_send(&s, &so, o)
                                            : cmd_peek(s, o);
            sb_sender_close(s);
        }
    }
    if (have_cfg)
        wk_config_free(&cfg);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o;
    const char *cmd;
    int rc, first = 2;

    memset(&o, 0, sizeof(o));
    o.max = 1000000;
    o.rate = 10;
    ib_log_set_level(IB_LOG_WARN);
    if (argc < 2)
        return usage("missing command");
    cmd = argv[1];
    if (strcmp(cmd, "inbox") == 0)
        return ctl_inbox(argc - 2, argv + 2);
    if (strcmp(cmd, "outbox") == 0)
        return ctl_outbox(argc - 2, argv + 2);
    if (strcmp(cmd, "status") == 0)
        return ctl_status(argc - 2, argv + 2);
    if (strcmp(cmd, "dlq") == 0) {
        if (argc < 3 || (strcmp(argv[2], "list") != 0 && strcmp(argv[2], "replay") != 0 &&
                         strcmp(argv[2], "stats") != 0))
            return usage("dlq takes 'list', 'stats' or 'replay'");
        o.dlq = true;
        o.replay = strcmp(argv[2], "replay") == 0;
        o.stats = strcmp(argv[2], "stats") == 0;
        first = 3;
    } else if (strcmp(cmd, "session") == 0) {
        if (argc < 3 || (strcmp(argv[2], "show") != 0 && strcmp(argv[2], "unpark") != 0))
            return usage("session takes 'show' or 'unpark'");
        o.session_cmd = argv[2];
        o.wait_s = 120;
        first = 3;
    } else if (strcmp(cmd, "blob") == 0) {
        if (argc < 3 || (strcmp(argv[2], "show") != 0 && strcmp(argv[2], "fetch") != 0))
            return usage("blob takes 'show' or 'fetch'");
        o.blob_cmd = argv[2];
        first = 3;
    } else if (strcmp(cmd, "send") != 0 && strcmp(cmd, "peek") != 0) {
        if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
            usage("help");
            return 0;
        }
        return usage("unknown command");
    }
    rc = parse_args(&o, argc, argv, first);
    if (rc == 0 && strcmp(cmd, "send") == 0 && !!o.body + !!o.body_file + !!o.file != 1)
        rc = usage("send takes exactly one of --body, --body-file, --file");
    if (rc == 0 && o.blob_cmd && (!o.message_id || !o.config))
        rc = usage("blob takes --message-id M and --config F (the routes)");
    if (rc == 0 && o.blob_cmd && strcmp(o.blob_cmd, "fetch") == 0 && !o.out)
        rc = usage("blob fetch takes --out FILE");
    if (rc == 0 && o.session_cmd && !o.session_id)
        rc = usage("session takes --session S");
    if (rc == 0)
        rc = run_broker_cmd(cmd, &o);
    for (size_t i = 0; i < o.nprops; i++) {
        free(o.props[i].key);
        free(o.props[i].str);
    }
    return rc;
}
