/*
 * ib_log.h - one JSON object per line on stdout.
 *
 *   IB_LOG(IB_LOG_INFO, "connect", IB_MSG("connected"), IB_S("host", host),
 *          IB_I("port", port));
 *
 * Every line carries ts (RFC 3339 UTC, milliseconds), level, event and the
 * given fields in order. The level check happens before any argument is
 * evaluated. Strings registered with ib_log_add_secret() are replaced by
 * "***" wherever they appear in a field value, as a last line of defence;
 * callers still never pass secrets or message bodies.
 *
 * thread: any. Lines from different threads never interleave.
 */
#ifndef IB_LOG_H
#define IB_LOG_H

#include <stdbool.h>
#include <stdio.h>

#include "ib_time.h" /* the line timestamps; callers use its clocks through this header */

typedef enum {
    IB_LOG_DEBUG = 0,
    IB_LOG_INFO,
    IB_LOG_WARN,
    IB_LOG_ERROR,
    IB_LOG_OFF
} ib_log_level_t;

typedef enum {
    IB_FT_END = 0,
    IB_FT_STR,
    IB_FT_INT,
    IB_FT_DBL,
    IB_FT_BOOL,
    IB_FT_RAW
} ib_field_type_t;

typedef struct ib_field {
    const char *key;
    ib_field_type_t type;
    const char *s; /* IB_FT_STR (NULL renders as null), IB_FT_RAW (JSON text) */
    long long i;   /* IB_FT_INT, IB_FT_BOOL */
    double d;      /* IB_FT_DBL */
} ib_field_t;

#define IB_S(k, v) ((ib_field_t){(k), IB_FT_STR, (v), 0, 0})
#define IB_I(k, v) ((ib_field_t){(k), IB_FT_INT, NULL, (long long)(v), 0})
#define IB_D(k, v) ((ib_field_t){(k), IB_FT_DBL, NULL, 0, (double)(v)})
#define IB_B(k, v) ((ib_field_t){(k), IB_FT_BOOL, NULL, (v) ? 1 : 0, 0})
#define IB_J(k, v) ((ib_field_t){(k), IB_FT_RAW, (v), 0, 0})
#define IB_MSG(v) IB_S("msg", (v))
#define IB_F_END_ ((ib_field_t){NULL, IB_FT_END, NULL, 0, 0})

extern volatile int ib_log_min_level;

#define ib_log_enabled(lvl) ((int)(lvl) >= ib_log_min_level)

#define IB_LOG(lvl, event, ...)                                                                    \
    do {                                                                                           \
        if (ib_log_enabled(lvl))                                                                   \
            ib_log_emit((lvl), (event), (const ib_field_t[]){__VA_ARGS__, IB_F_END_});             \
    } while (0)

/* Writes one line; fields ends with an IB_FT_END entry. Prefer IB_LOG. */
void ib_log_emit(ib_log_level_t lvl, const char *event, const ib_field_t *fields);

void ib_log_set_level(ib_log_level_t lvl);
/* "debug", "info", "warn", "error", "off"; returns -1 for anything else. */
int ib_log_level_parse(const char *s);
const char *ib_log_level_name(ib_log_level_t lvl);
/* Redirects output (tests). NULL restores stdout. */
void ib_log_set_stream(FILE *fp);
/* Registers a secret to mask in every later line; strings under 4 bytes are ignored. */
void ib_log_add_secret(const char *secret);
void ib_log_clear_secrets(void);

#endif
