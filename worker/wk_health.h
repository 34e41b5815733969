/*
 * wk_health.h - the operations endpoints of inboxd on http.listen:
 *
 *   GET /healthz  200 while the event loop heartbeat is recent, else 503.
 *                 Stays 200 while draining: the process is alive and must
 *                 be left to finish its work.
 *   GET /readyz   200 when AMQP is connected and authenticated, the
 *                 receiver links are attached, the database is reachable
 *                 and the worker is not draining; else 503 with the unmet
 *                 conditions in the body.
 *   GET /metrics  the wk_metrics registry in Prometheus text format 0.0.4.
 *
 * The server is a single thread of its own running poll() over non-blocking
 * sockets. Each connection gets one request and a "Connection: close"
 * response. Requests are bounded in size (431 beyond it) and in time (the
 * whole request head must arrive within the read deadline, else 408), and
 * connections are bounded in number: when the table is full, the oldest
 * connection still reading its request is dropped to make room, so slow or
 * idle clients can neither stall the worker nor lock out the kubelet and
 * Prometheus.
 *
 * The worker reports state through wk_health_heartbeat and
 * wk_health_set_condition / wk_health_set_draining; those are a relaxed atomic
 * store each, never block and may be called on a NULL server (so a worker
 * with http.listen empty need not check).
 */
#ifndef WK_HEALTH_H
#define WK_HEALTH_H

#include <stdbool.h>
#include <stddef.h>

#include "ib_err.h"
#include "wk_metrics.h"

typedef struct wk_health wk_health_t;

/* Readiness conditions; all start unmet. */
typedef enum {
    WK_HEALTH_AMQP_CONNECTED = 0, /* connection open and CBS token accepted */
    WK_HEALTH_LINKS_ATTACHED,     /* every receiver link attached with credit */
    WK_HEALTH_DB_REACHABLE,       /* the pool has a live connection */
    WK_HEALTH__COND_COUNT
} wk_health_cond_t;

typedef struct wk_health_opts {
    const char *listen;             /* "host:port", "[v6]:port" or ":port"; NULL/"" disables */
    wk_metrics_t *metrics;          /* served on /metrics; NULL serves 404. Not owned. */
    long long heartbeat_max_age_ms; /* /healthz fails past this; 0 = 30000 */
    size_t max_request_bytes;       /* whole request head; 0 = 8192 */
    int read_timeout_ms;            /* deadline for the request head; 0 = 5000 */
    int write_timeout_ms;           /* deadline for sending the response; 0 = 10000 */
    int max_connections;            /* concurrent connections; 0 = 32 */
    /*
     * Monotonic milliseconds for the heartbeat's age and every deadline;
     * NULL = ib_mono_ms. Tests pass a clock they step. Called from the
     * server thread and from the threads that call the setters.
     */
    long long (*clock_ms)(void *ctx);
    void *clock_ctx;
} wk_health_opts_t;

/*
 * Binds opts->listen and starts the server thread. With listen NULL or ""
 * it returns a disabled server (no socket, no thread) whose setters still
 * work, so callers need not special-case it. The heartbeat starts at the
 * time of this call. Returns NULL and fills err (IB_E_CONFIG for a malformed
 * address, IB_E_IO when the address cannot be bound) on failure.
 * thread: main, before the worker threads start.
 */
wk_health_t *wk_health_start(const wk_health_opts_t *opts, ib_error_t *err);

/*
 * Checks listen exactly as wk_health_start parses and resolves it, without
 * binding (so --check-config rejects what the daemon would reject). NULL or
 * "" is fine. Returns IB_E_OK, or IB_E_CONFIG with err saying why.
 * thread: any.
 */
ib_err_t wk_health_listen_check(const char *listen, ib_error_t *err);

/*
 * Stops the thread, closes every socket and frees the server. Call it after
 * the last setter call. NULL is a no-op. thread: main.
 */
void wk_health_stop(wk_health_t *h);

/* The bound TCP port (useful with port 0), or 0 when disabled. thread: any. */
int wk_health_port(const wk_health_t *h);

/*
 * Records that the event loop is turning. The proactor thread calls it on
 * every batch of events and on a periodic timer (every few seconds), so an
 * idle but healthy loop stays live. thread: any (normally proactor).
 */
void wk_health_heartbeat(wk_health_t *h);

/* Marks one readiness condition met or unmet. thread: any. */
void wk_health_set_condition(wk_health_t *h, wk_health_cond_t cond, bool met);

/*
 * Draining makes /readyz fail (so the pod leaves its Service endpoints and
 * KEDA/HPA see it going) while /healthz keeps reporting the loop. Call with
 * true at the first SIGTERM. thread: any.
 */
void wk_health_set_draining(wk_health_t *h, bool draining);

/*
 * Whether /healthz and /readyz would answer 200 now; for the worker's own
 * logs and for tests. why (may be NULL) gets the unmet conditions.
 * thread: any.
 */
bool wk_health_is_live(const wk_health_t *h);
bool wk_health_is_ready(const wk_health_t *h, char *why, size_t why_size);

#endif
