/*
 * sbt.h - helpers of the amqp/ integration tests: start a real sbemu
 * process on a loopback port chosen at run time, read its stats file, and a
 * small in-test "worker" that collects what the client hands out. Checks
 * are ib_test.h's asserts; outside RUN a failed one exits 1 at once.
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

#include "ib_test.h"
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
    _Atomic int shutdown_completes;     /* reported at stop as complete: never chosen, never true */
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

#endif
