/*
 * ib_err.h - the one error enum of inboxd and the error value that crosses
 * module boundaries.
 *
 * Codes say what went wrong; the class says what the caller does about it.
 * The worker settles a message from the class alone and never parses text.
 */
#ifndef IB_ERR_H
#define IB_ERR_H

#include <stddef.h>

/* X(NAME, description). Add new codes at the end of a group. */
#define IB_ERR_MAP(X)                                                                              \
    X(OK, "success")                                                                               \
    X(NOMEM, "out of memory")                                                                      \
    X(INVAL, "invalid argument")                                                                   \
    X(CONFIG, "invalid configuration")                                                             \
    X(IO, "input/output error")                                                                    \
    X(TIMEOUT, "operation timed out")                                                              \
    X(AGAIN, "try again later")                                                                    \
    X(CLOSED, "closed")                                                                            \
    X(AUTH, "authentication or authorization failed")                                              \
    X(NOTFOUND, "entity not found")                                                                \
    X(TLS, "TLS failure")                                                                          \
    X(DB, "database error")                                                                        \
    X(DB_CONN, "database connection lost")                                                         \
    X(DB_SETUP, "the database's setup refuses the statement (missing object, privilege, "           \
                "read-only, full)")                                                                \
    X(CONFLICT, "idempotency key reused with a different body")                                    \
    X(LOCK_LOST, "message or session lock lost")                                                   \
    X(SETTLE_UNKNOWN, "settlement sent, never answered: the broker may or may not have applied it") \
    X(DETACHED, "link detached before settlement")                                                 \
    X(DECODE, "message could not be decoded")                                                      \
    X(NO_ROUTE, "no route matches the message")                                                    \
    X(INVALID_JSON, "message body is not valid JSON")                                              \
    X(MISSING_FIELD, "a field the route needs is missing")                                         \
    X(NOT_ALLOWED, "a bound URL names a host the route does not allow")                            \
    X(BROKER, "broker returned an error")                                                          \
    X(SHUTDOWN, "shutting down")

typedef enum {
#define IB_ERR_ENUM_(name, desc) IB_E_##name,
    IB_ERR_MAP(IB_ERR_ENUM_)
#undef IB_ERR_ENUM_
        IB_E__COUNT
} ib_err_t;

/* What the caller should do about an error. */
typedef enum {
    IB_CLASS_NONE = 0,  /* no error */
    IB_CLASS_TRANSIENT, /* retry, then abandon */
    IB_CLASS_PERMANENT, /* dead-letter (or record) */
    IB_CLASS_DUPLICATE, /* already applied: complete */
    IB_CLASS_AMBIGUOUS, /* outcome unknown: record uncertain, dead-letter */
} ib_class_t;

/*
 * The error value. Fixed size and self-contained, so it can be copied into a
 * result queue and read by another thread without ownership questions.
 */
typedef struct ib_error {
    ib_err_t code;
    ib_class_t cls;
    char sqlstate[6];   /* "" when not from a database */
    long native;        /* driver-native code, 0 when none */
    char condition[96]; /* AMQP condition symbol, "" when none */
    char text[512];     /* human text; never holds a secret */
} ib_error_t;

/* Symbolic name ("IB_E_TIMEOUT") and description of a code. Never NULL. */
const char *ib_err_name(ib_err_t code);
const char *ib_err_str(ib_err_t code);
/* "transient", "permanent", "duplicate", "ambiguous" or "none". */
const char *ib_class_name(ib_class_t cls);

/* Resets err to success. err may be NULL. */
void ib_error_clear(ib_error_t *err);
/*
 * Fills err (if not NULL) with code, class and a printf-formatted text,
 * clearing the database and AMQP fields. Returns code so callers can write
 * `return ib_error_set(err, ...)`.
 */
ib_err_t ib_error_set(ib_error_t *err, ib_err_t code, ib_class_t cls, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Appends ": <prefix>" style context in front of the existing text. */
void ib_error_prefix(ib_error_t *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Copies at most size-1 bytes and always terminates; returns strlen(src). */
size_t ib_strlcpy(char *dst, const char *src, size_t size);

#endif
