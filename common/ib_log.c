#include "ib_log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ib_enc.h"

#define LOG_LINE_MAX 16384
#define LOG_VALUE_MAX 4096
#define LOG_SECRETS_MAX 16

volatile int ib_log_min_level = IB_LOG_INFO;

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static FILE *log_fp;
static char *secrets[LOG_SECRETS_MAX];
static size_t nsecrets;

typedef struct {
    char *p;
    size_t len, cap;
    bool full;
} buf_t;

static void put(buf_t *b, const char *s, size_t n)
{
    /* Keep room for the closing "}\n" and the terminator. */
    if (b->len + n + 3 > b->cap) {
        b->full = true;
        n = b->cap > b->len + 3 ? b->cap - b->len - 3 : 0;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void puts_(buf_t *b, const char *s)
{
    put(b, s, strlen(s));
}

/* Writes the n bytes at s as a JSON string; past LOG_VALUE_MAX escaped bytes, "...". */
static void put_escaped(buf_t *b, const char *s, size_t n)
{
    size_t room, used;

    put(b, "\"", 1);
    /* Keep room for the closing quote, "}\n" and the terminator. */
    room = b->cap > b->len + 4 ? b->cap - b->len - 4 : 0;
    bool line_bound = room <= LOG_VALUE_MAX + 1;
    if (!line_bound)
        room = LOG_VALUE_MAX + 1;
    if (room > 0)
        b->len += ib_enc_json(b->p + b->len, room, s, n, &used);
    else
        used = 0;
    if (used < n) {
        if (line_bound)
            b->full = true;
        else
            puts_(b, "...");
    }
    put(b, "\"", 1);
}

/* Whether a registered secret occurs in the n bytes at s. log_mu held. */
static bool has_secret(const char *s, size_t n)
{
    for (size_t k = 0; k < nsecrets; k++)
        if (memmem(s, n, secrets[k], strlen(secrets[k])))
            return true;
    return false;
}

/* Writes s as a JSON string with every registered secret masked. */
static void put_string(buf_t *b, const char *s)
{
    char tmp[LOG_VALUE_MAX + 1];
    size_t n = strlen(s);
    bool masked = false;

    if (n > LOG_VALUE_MAX)
        n = LOG_VALUE_MAX;
    if (!has_secret(s, n)) { /* the common case: no copy to mask in */
        put_escaped(b, s, n);
        return;
    }
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    for (size_t k = 0; k < nsecrets; k++) {
        size_t sl = strlen(secrets[k]);
        char *hit;
        while ((hit = strstr(tmp, secrets[k])) != NULL) {
            /* Replace in place: "***" is never longer than a secret (>= 4). */
            memcpy(hit, "***", 3);
            memmove(hit + 3, hit + sl, strlen(hit + sl) + 1);
            masked = true;
        }
    }
    (void)masked;
    put_escaped(b, tmp, strlen(tmp));
}

static const char *const level_names[] = {"debug", "info", "warn", "error", "off"};

const char *ib_log_level_name(ib_log_level_t lvl)
{
    return (unsigned)lvl <= IB_LOG_OFF ? level_names[lvl] : "info";
}

int ib_log_level_parse(const char *s)
{
    for (int i = 0; i <= IB_LOG_OFF; i++)
        if (s && strcmp(s, level_names[i]) == 0)
            return i;
    return -1;
}

void ib_log_set_level(ib_log_level_t lvl)
{
    ib_log_min_level = (int)lvl;
}

void ib_log_set_stream(FILE *fp)
{
    pthread_mutex_lock(&log_mu);
    log_fp = fp;
    pthread_mutex_unlock(&log_mu);
}

void ib_log_add_secret(const char *secret)
{
    if (!secret || strlen(secret) < 4)
        return;
    pthread_mutex_lock(&log_mu);
    for (size_t k = 0; k < nsecrets; k++) {
        if (strcmp(secrets[k], secret) == 0) {
            pthread_mutex_unlock(&log_mu);
            return;
        }
    }
    if (nsecrets < LOG_SECRETS_MAX) {
        char *dup = strdup(secret);
        if (dup)
            secrets[nsecrets++] = dup;
    }
    pthread_mutex_unlock(&log_mu);
}

void ib_log_clear_secrets(void)
{
    pthread_mutex_lock(&log_mu);
    for (size_t k = 0; k < nsecrets; k++)
        free(secrets[k]);
    nsecrets = 0;
    pthread_mutex_unlock(&log_mu);
}

void ib_log_emit(ib_log_level_t lvl, const char *event, const ib_field_t *fields)
{
    char line[LOG_LINE_MAX], ts[32], num[64];
    buf_t b = {line, 0, sizeof(line), false};

    ib_time_rfc3339(ts, sizeof(ts), -1);
    pthread_mutex_lock(&log_mu);
    puts_(&b, "{\"ts\":\"");
    puts_(&b, ts);
    puts_(&b, "\",\"level\":\"");
    puts_(&b, ib_log_level_name(lvl));
    puts_(&b, "\",\"event\":");
    put_escaped(&b, event ? event : "", event ? strlen(event) : 0);
    for (const ib_field_t *f = fields; f && f->type != IB_FT_END && !b.full; f++) {
        put(&b, ",", 1);
        put_escaped(&b, f->key, strlen(f->key));
        put(&b, ":", 1);
        switch (f->type) {
        case IB_FT_STR:
            if (f->s)
                put_string(&b, f->s);
            else
                puts_(&b, "null");
            break;
        case IB_FT_INT:
            put(&b, num, ib_enc_decimal(num, f->i));
            break;
        case IB_FT_DBL:
            snprintf(num, sizeof(num), "%.6g", f->d);
            puts_(&b, num);
            break;
        case IB_FT_BOOL:
            puts_(&b, f->i ? "true" : "false");
            break;
        case IB_FT_RAW:
            puts_(&b, f->s && *f->s ? f->s : "null");
            break;
        default:
            puts_(&b, "null");
        }
    }
    if (b.full) {
        /* A truncated line must still be valid JSON: drop back to the fields
         * that fit whole and say so. */
        b.full = false;
        b.len = 0;
        puts_(&b, "{\"ts\":\"");
        puts_(&b, ts);
        puts_(&b, "\",\"level\":\"");
        puts_(&b, ib_log_level_name(lvl));
        puts_(&b, "\",\"event\":");
        put_escaped(&b, event ? event : "", event ? strlen(event) : 0);
        puts_(&b, ",\"truncated\":true");
    }
    put(&b, "}\n", 2);
    fwrite(line, 1, b.len, log_fp ? log_fp : stdout);
    fflush(log_fp ? log_fp : stdout);
    pthread_mutex_unlock(&log_mu);
}
