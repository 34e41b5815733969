/*
 * sbt.h - helpers of the amqp/ integration tests: start a real sbemu
 * process on a loopback port chosen at run time, read its stats file, and a
 * small in-test "worker" that collects what the client hands out.
 *
 * Timeouts scale with INBOXD_TEST_TIMEOUT_MULTIPLIER (sanitizer builds).
 */
#ifndef SBT_H
#define SBT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "sb_client.h"
#include "sb_send.h"

typedef struct sbt_emu {
    pid_t pid;
    int port;
    char dir[256];     /* temporary directory of this run */
    char stats[300];   /* stats file path */
    char connstr[512]; /* UseDevelopmentEmulator=true, with the key the emulator checks */
} sbt_emu_t;

/* Milliseconds scaled by the multiplier. */
long long sbt_ms(long long ms);

/*
 * Writes topology to a file and starts sbemu with it plus extra (a
 * NULL-terminated list of further arguments, may be NULL). Exits the test
 * with status 1 and a clear message if sbemu is missing or does not start.
 */
void sbt_emu_start(sbt_emu_t *emu, const char *topology, const char *const *extra);
void sbt_emu_stop(sbt_emu_t *emu);

/*
 * A counter of entity from the stats file (sbt_emu_start waited for the
 * first one). Ends the test, saying what is missing, when the file, the
 * entity or the counter is absent: a misspelt name never reads as a value.
 */
long long sbt_stat(sbt_emu_t *emu, const char *entity, const char *field);
/* dead_lettered_by_reason[reason] of entity: 0 for a reason not seen. */
long long sbt_stat_reason(sbt_emu_t *emu, const char *entity, const char *reason);
/* The stats file's seq (sbemu counts every rewrite). */
long long sbt_stat_seq(sbt_emu_t *emu);
/*
 * Waits for a stats file rendered wholly after the read of seq (seq + 2:
 * seq + 1 may have been rendered before it); ends the test after 10 s
 * (scaled). For an absence: once what could cause it is over, a fresh file
 * shows it.
 */
void sbt_stat_fresh(sbt_emu_t *emu, long long seq);
/* Polls until the counter equals want; returns the last value seen. */
long long sbt_wait_stat(sbt_emu_t *emu, const char *entity, const char *field, long long want,
                        long long timeout_ms);

/* Sends n messages "<prefix>-<i>" (body "{\"n\":i}") to entity; exits on failure. */
void sbt_send(sbt_emu_t *emu, const char *entity, const char *prefix, int n,
              const char *session_id);

/* The in-test worker. */
#define SBT_MAX 4096
typedef struct sbt_rx {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    sb_msg_t *q[SBT_MAX]; /* handed out, not yet taken by the test */
    size_t qn;
    /* Counters are atomic: the test polls them while the client runs. */
    _Atomic int received, settled, settled_ok, lock_lost, shutdown, ready;
    _Atomic int shutdown_completes; /* reported at stop as complete: never chosen, never true */
    _Atomic int last_why;               /* ib_err_t of the last on_state(0, why) */
    _Atomic int results[64];            /* by ib_err_t code */
    _Atomic int inflight, max_inflight; /* handed and not yet settled */
    sb_msg_t *lost[SBT_MAX];            /* on_lock_lost */
    size_t nlost;
    void (*hook)(struct sbt_rx *rx, sb_msg_t *msg); /* optional, called in on_message */
    void *user;
} sbt_rx_t;

void sbt_rx_init(sbt_rx_t *rx);
void sbt_rx_destroy(sbt_rx_t *rx);
void sbt_callbacks(sbt_rx_t *rx, sb_callbacks_t *cb);
/* Next handed-out message, or NULL after timeout_ms. */
sb_msg_t *sbt_take(sbt_rx_t *rx, long long timeout_ms);
/* Waits until rx->settled >= n. */
bool sbt_wait_settled(sbt_rx_t *rx, int n, long long timeout_ms);
bool sbt_wait_ready(sbt_rx_t *rx, long long timeout_ms);

/* Options for a client of entity on emu with short test timings. */
void sbt_options(sbt_emu_t *emu, const char *entity, sb_options_t *opt);
/*
 * Creates and starts a client of opt with callbacks cb (usually from
 * sbt_callbacks); exits the test, saying why, when it cannot.
 */
sb_client_t *sbt_client_start(const sb_options_t *opt, const sb_callbacks_t *cb);

/*
 * Checks that end the test (exit 1) on failure, printing file, line, the
 * expression and, for the comparisons, the value of each side (like
 * ib_test.h), so that a red CI run explains itself. Each side is evaluated
 * once.
 */
#define SBT_CHECK(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);               \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* A printable form of a value of any scalar type, in buf. */
#define SBT_SHOW_(buf, x)                                                                          \
    _Generic((x),                                                                                  \
        char *: sbt_show_str,                                                                      \
        const char *: sbt_show_str,                                                                \
        float: sbt_show_dbl,                                                                       \
        double: sbt_show_dbl,                                                                      \
        _Bool: sbt_show_int,                                                                       \
        char: sbt_show_int,                                                                        \
        signed char: sbt_show_int,                                                                 \
        short: sbt_show_int,                                                                       \
        int: sbt_show_int,                                                                         \
        long: sbt_show_int,                                                                        \
        long long: sbt_show_int,                                                                   \
        unsigned char: sbt_show_uint,                                                              \
        unsigned short: sbt_show_uint,                                                             \
        unsigned: sbt_show_uint,                                                                   \
        unsigned long: sbt_show_uint,                                                              \
        unsigned long long: sbt_show_uint,                                                         \
        default: sbt_show_ptr)((buf), (x))

#define SBT_CHECK_OP_(a, op, b)                                                                    \
    do {                                                                                           \
        __auto_type a_ = (a);                                                                      \
        __auto_type b_ = (b);                                                                      \
        /* a literal side no longer looks constant here: compare as a op b would */                \
        _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wsign-compare\"")      \
        bool ok_ = a_ op b_;                                                                       \
        _Pragma("GCC diagnostic pop")                                                              \
        if (!ok_) {                                                                                \
            char sa_[64], sb_[64];                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s %s %s: %s vs %s\n", __FILE__, __LINE__, #a,   \
                    #op, #b, SBT_SHOW_(sa_, a_), SBT_SHOW_(sb_, b_));                              \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define SBT_CHECK_EQ(a, b) SBT_CHECK_OP_(a, ==, b)
#define SBT_CHECK_NE(a, b) SBT_CHECK_OP_(a, !=, b)
#define SBT_CHECK_LT(a, b) SBT_CHECK_OP_(a, <, b)
#define SBT_CHECK_LE(a, b) SBT_CHECK_OP_(a, <=, b)
#define SBT_CHECK_GT(a, b) SBT_CHECK_OP_(a, >, b)
#define SBT_CHECK_GE(a, b) SBT_CHECK_OP_(a, >=, b)

/* Both strings equal (a NULL side fails). */
#define SBT_CHECK_STREQ(a, b)                                                                      \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (!a_ || !b_ || strcmp(a_, b_) != 0) {                                                   \
            fprintf(stderr, "%s:%d: check failed: %s == %s: \"%s\" vs \"%s\"\n", __FILE__,         \
                    __LINE__, #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* For SBT_SHOW_: each writes into buf (64 bytes) and returns it. */
const char *sbt_show_int(char *buf, long long v);
const char *sbt_show_uint(char *buf, unsigned long long v);
const char *sbt_show_dbl(char *buf, double v);
const char *sbt_show_str(char *buf, const char *v);
const char *sbt_show_ptr(char *buf, const void *v);

#endif
