#include "ib_log.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ib_utf8.h"

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

static void put_escaped(buf_t *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t start = b->len;

    put(b, "\"", 1);
    for (size_t i = 0; i < n && !b->full; i++) {
        unsigned char c = (unsigned char)s[i];
        if (b->len - start > LOG_VALUE_MAX) {
            puts_(b, "...");
            break;
        }
        switch (c) {
        case '"':
            put(b, "\\\"", 2);
            break;
        case '\\':
            put(b, "\\\\", 2);
            break;
        case '\n':
            put(b, "\\n", 2);
            break;
        case '\r':
            put(b, "\\r", 2);
            break;
        case '\t':
            put(b, "\\t", 2);
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
                put(b, u, 6);
            } else if (c < 0x80) {
                put(b, (const char *)&c, 1);
            } else {
                /* Whole well-formed sequences only; any other byte becomes
                 * U+FFFD, so every line stays valid UTF-8 and valid JSON. */
                size_t l = ib_utf8_seq_len((const unsigned char *)s + i, n - i);
                if (l == 0) {
                    put(b, "\\ufffd", 6);
                } else {
                    put(b, s + i, l);
                    i += l - 1;
                }
            }
        }
    }
    put(b, "\"", 1);
}

/* Writes s as a JSON string with every registered secret masked. */
static void put_string(buf_t *b, const char *s)
{
    char tmp[LOG_VALUE_MAX + 1];
    size_t n = strlen(s);
    bool masked = false;

    if (n > LOG_VALUE_MAX)
        n = LOG_VALUE_MAX;
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

void ib_time_rfc3339(char *buf, size_t size, long long ms)
{
    struct tm tm;
    time_t sec;

    if (ms < 0)
        ms = ib_now_ms();
    sec = (time_t)(ms / 1000);
    gmtime_r(&sec, &tm);
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}

long long ib_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

long long ib_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
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
            snprintf(num, sizeof(num), "%lld", f->i);
            puts_(&b, num);
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
