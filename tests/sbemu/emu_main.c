/*
 * emu_main.c - sbemu's command line, signal handling and proactor loop.
 *
 *   sbemu --listen HOST:PORT --topology FILE [--key-name NAME --key KEY]
 *         [--stats-file PATH] [--jwt-issuer ISS --jwt-secret SECRET]
 *         [--tls-cert PEM --tls-key PEM] [--http-listen HOST:PORT]
 *         [--fault-... N] [--log-level LEVEL]
 *
 * The first stdout line is {"event":"listening","port":N} (with
 * "http_port":M when --http-listen is given, "ws_port":W with --ws-listen). SIGTERM/SIGINT
 * stop it cleanly (stats written, exit 0); a second signal exits at once. SIGUSR1 makes
 * the namespace read-only (a Geo-Replication promotion window), a second one ends it.
 */
#include "emu_broker.h"
#include "emu_http.h"
#include "emu_ws.h"
#include "emu_stats.h"
#include "ib_log.h"

#include <proton/listener.h>
#include <proton/logger.h>
#include <proton/netaddr.h>
#include <proton/ssl.h>
#include <proton/transport.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pn_proactor_t *g_proactor;
static volatile sig_atomic_t g_signals;
static volatile sig_atomic_t g_read_only;

/* thread: signal handler. SIGUSR1 toggles the read-only window (emu_cbs.c). */
static void on_usr1(int sig)
{
    (void)sig;
    g_read_only = !g_read_only;
}

/* thread: signal handler. Only interrupts the proactor; a second signal exits. */
static void on_signal(int sig)
{
    (void)sig;
    if (g_signals++)
        _exit(1);
    pn_proactor_interrupt(g_proactor);
}

/* thread: proactor. Proton's own log lines join sbemu's JSON stream. */
static void proton_log_sink(intptr_t ctx, pn_log_subsystem_t sub, pn_log_level_t sev,
                            const char *msg)
{
    (void)ctx;
    ib_log_level_t lvl = sev <= PN_LEVEL_ERROR     ? IB_LOG_ERROR
                         : sev <= PN_LEVEL_WARNING ? IB_LOG_WARN
                                                   : IB_LOG_DEBUG;
    IB_LOG(lvl, "proton", IB_S("subsystem", pn_logger_subsystem_name(sub)), IB_MSG(msg));
}

static void usage(FILE *fp)
{
    fprintf(fp,
            "usage: sbemu --listen HOST:PORT --topology FILE [options]\n"
            "  --key-name NAME          SAS rule name tokens must carry (skn)\n"
            "  --key KEY                SAS key text; without it every token is accepted\n"
            "  --jwt-issuer ISS         accept put-token type jwt (HS256) from this issuer\n"
            "  --jwt-secret SECRET      HS256 secret for --jwt-issuer\n"
            "  --token-lifetime-s S     a put-token grants at most S s (links detached\n"
            "                           amqp:unauthorized-access when their token expires)\n"
            "  --fault-refuse-put-token K  answer the next K token renewals 401\n"
            "  --fault-refuse-first-put-token K  answer the first K put-tokens of each\n"
            "                           connection 401\n"
            "  --stats-file PATH        rewrite per-entity counters every second and on exit\n"
            "  --stats-every-ms T       rewrite them every T ms instead (10 to 60000)\n"
            "  --max-message-bytes N    largest message accepted (default 262144, the Standard\n"
            "                           tier; Premium allows up to 104857600)\n"
            "  --tls-cert PEM --tls-key PEM  also accept TLS (AMQPS) on the same port\n"
            "  --http-listen HOST:PORT  serve entity descriptions and counts over HTTP(S)\n"
            "  --ws-listen HOST:PORT    also serve AMQP over WebSockets (AMQPWSB10; wss:// with\n"
            "                           --tls-cert/--tls-key, else ws://)\n"
            "  --fault-http-status N    answer every management HTTP request with status N\n"
            "  --log-level LEVEL        debug|info|warn|error (default warn)\n"
            "  --fault-drop-after N     close each connection after N deliveries on it\n"
            "  --fault-drop-every-ms T  close every connection every T ms\n"
            "  --fault-refuse-renew K   answer the next K renew-lock requests 410 lock-lost\n"
            "  --fault-lock-early-ms MS locks expire MS before the locked-until they announce\n"
            "  --fault-settle-delay-ms D  delay every settlement reply by D ms\n"
            "  --fault-drop-settle-reply K  apply but never answer the next K settlements\n"
            "  --fault-ignore-drain K   leave the next K drains of an empty session unanswered\n"
            "  --fault-refuse-set-state K  answer the next K set-session-state requests 500\n"
            "  --fault-busy-get-state K    answer the next K get-session-state requests busy\n"
            "  --fault-busy-set-state K    answer the next K set-session-state requests busy\n"
            "  --fault-stall-set-state K   leave the next K set-session-state requests unanswered\n"
            "  --fault-ignore-dead-letter K  neither apply nor answer the next K dead letters\n"
            "  --fault-server-busy-for-ms T  answer com.microsoft:server-busy for T ms, from\n"
            "  --fault-server-busy-after N   the N-th delivery on (default: the first)\n"
            "  --fault-stall-link K     the K-th receive link attached never gets a transfer,\n"
            "  --fault-stall-links C    nor the C-1 after it (default 1)\n"
            "  --fault-idle-close-link-ms T  detach an entity link that moved no message for T ms\n"
            "                           (amqp:link:detach-forced)\n"
            "  --fault-idle-close-conn-ms T  close a connection that moved nothing for T ms\n"
            "                           (amqp:connection:forced)\n");
}

static int parse_int(const char *flag, const char *v, int *out)
{
    char *end;
    long n = strtol(v, &end, 10);
    if (*v == '\0' || *end || n < 0 || n > (1L << 30)) {
        fprintf(stderr, "sbemu: %s needs a non-negative integer, got '%s'\n", flag, v);
        return -1;
    }
    *out = (int)n;
    return 0;
}

int main(int argc, char **argv)
{
    const char *listen = NULL, *topology = NULL, *tls_cert = NULL, *tls_key = NULL;
    const char *http_listen = NULL, *ws_listen = NULL;
    int http_status = 0;
    emu_broker_t b;
    memset(&b, 0, sizeof b);
    emu_faults_t cli = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    ib_log_set_level(IB_LOG_WARN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "sbemu: %s needs a value\n", a);
            usage(stderr);
            return 2;
        }
        const char *v = argv[++i];
        int rc = 0;
        if (strcmp(a, "--listen") == 0)
            listen = v;
        else if (strcmp(a, "--topology") == 0)
            topology = v;
        else if (strcmp(a, "--key-name") == 0)
            b.key_name = v;
        else if (strcmp(a, "--key") == 0)
            b.key = v;
        else if (strcmp(a, "--jwt-issuer") == 0)
            b.jwt_issuer = v;
        else if (strcmp(a, "--jwt-secret") == 0)
            b.jwt_secret = v;
        else if (strcmp(a, "--token-lifetime-s") == 0)
            rc = parse_int(a, v, &b.token_lifetime_s);
        else if (strcmp(a, "--fault-refuse-put-token") == 0)
            rc = parse_int(a, v, &b.refuse_put_token);
        else if (strcmp(a, "--fault-refuse-first-put-token") == 0)
            rc = parse_int(a, v, &b.refuse_first_put_token);
        else if (strcmp(a, "--stats-file") == 0)
            b.stats_file = v;
        else if (strcmp(a, "--stats-every-ms") == 0) {
            char *end;
            long ms = strtol(v, &end, 10);
            if (*end || ms < 10 || ms > 60000) {
                fprintf(stderr, "sbemu: bad --stats-every-ms '%s' (10 to 60000)\n", v);
                return 2;
            }
            b.stats_every_ms = ms;
        }
        else if (strcmp(a, "--max-message-bytes") == 0) {
            char *end;
            long long n = strtoll(v, &end, 10);
            if (*end || n < 1024 || n > 104857600LL) {
                fprintf(stderr, "sbemu: bad --max-message-bytes '%s' (1024 to 104857600)\n", v);
                return 2;
            }
            b.max_message_bytes = (size_t)n;
        }
        else if (strcmp(a, "--tls-cert") == 0)
            tls_cert = v;
        else if (strcmp(a, "--tls-key") == 0)
            tls_key = v;
        else if (strcmp(a, "--http-listen") == 0)
            http_listen = v;
        else if (strcmp(a, "--ws-listen") == 0)
            ws_listen = v;
        else if (strcmp(a, "--fault-http-status") == 0)
            rc = parse_int(a, v, &http_status);
        else if (strcmp(a, "--log-level") == 0) {
            int lvl = ib_log_level_parse(v);
            if (lvl < 0) {
                fprintf(stderr, "sbemu: bad --log-level '%s'\n", v);
                return 2;
            }
            ib_log_set_level((ib_log_level_t)lvl);
        } else if (strcmp(a, "--fault-drop-after") == 0)
            rc = parse_int(a, v, &cli.drop_after);
        else if (strcmp(a, "--fault-drop-every-ms") == 0)
            rc = parse_int(a, v, &cli.drop_every_ms);
        else if (strcmp(a, "--fault-refuse-renew") == 0)
            rc = parse_int(a, v, &cli.refuse_renew);
        else if (strcmp(a, "--fault-lock-early-ms") == 0)
            rc = parse_int(a, v, &cli.lock_early_ms);
        else if (strcmp(a, "--fault-settle-delay-ms") == 0)
            rc = parse_int(a, v, &cli.settle_delay_ms);
        else if (strcmp(a, "--fault-drop-settle-reply") == 0)
            rc = parse_int(a, v, &cli.drop_settle_reply);
        else if (strcmp(a, "--fault-ignore-drain") == 0)
            rc = parse_int(a, v, &cli.ignore_drain);
        else if (strcmp(a, "--fault-refuse-set-state") == 0)
            rc = parse_int(a, v, &cli.refuse_set_state);
        else if (strcmp(a, "--fault-stall-set-state") == 0)
            rc = parse_int(a, v, &cli.stall_set_state);
        else if (strcmp(a, "--fault-busy-get-state") == 0)
            rc = parse_int(a, v, &cli.busy_get_state);
        else if (strcmp(a, "--fault-busy-set-state") == 0)
            rc = parse_int(a, v, &cli.busy_set_state);
        else if (strcmp(a, "--fault-ignore-dead-letter") == 0)
            rc = parse_int(a, v, &cli.ignore_dead_letter);
        else if (strcmp(a, "--fault-server-busy-for-ms") == 0)
            rc = parse_int(a, v, &cli.server_busy_for_ms);
        else if (strcmp(a, "--fault-server-busy-after") == 0)
            rc = parse_int(a, v, &cli.server_busy_after);
        else if (strcmp(a, "--fault-stall-link") == 0)
            rc = parse_int(a, v, &cli.stall_link);
        else if (strcmp(a, "--fault-stall-links") == 0)
            rc = parse_int(a, v, &cli.stall_links);
        else if (strcmp(a, "--fault-idle-close-link-ms") == 0)
            rc = parse_int(a, v, &cli.idle_close_link_ms);
        else if (strcmp(a, "--fault-idle-close-conn-ms") == 0)
            rc = parse_int(a, v, &cli.idle_close_conn_ms);
        else {
            fprintf(stderr, "sbemu: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (rc)
            return 2;
    }
    if (!listen || !topology) {
        fprintf(stderr, "sbemu: --listen and --topology are required\n");
        usage(stderr);
        return 2;
    }
    if ((b.jwt_issuer == NULL) != (b.jwt_secret == NULL)) {
        fprintf(stderr, "sbemu: --jwt-issuer and --jwt-secret go together\n");
        return 2;
    }
    if ((tls_cert == NULL) != (tls_key == NULL)) {
        fprintf(stderr, "sbemu: --tls-cert and --tls-key go together\n");
        return 2;
    }
    if (tls_cert) {
        /* TLS and plain AMQP on one port: UseDevelopmentEmulator clients still connect. */
        b.tls = pn_ssl_domain(PN_SSL_MODE_SERVER);
        if (!b.tls || pn_ssl_domain_set_credentials(b.tls, tls_cert, tls_key, NULL) != 0 ||
            pn_ssl_domain_allow_unsecured_client(b.tls) != 0) {
            fprintf(stderr, "sbemu: cannot load TLS certificate %s / key %s\n", tls_cert, tls_key);
            if (b.tls)
                pn_ssl_domain_free(b.tls);
            return 2;
        }
    }
    if (b.key)
        ib_log_add_secret(b.key);
    b.ns = emu_ns_new();
    if (!b.ns)
        return 1;
    char err[512];
    if (emu_topo_load(topology, b.ns, &b.faults, err, sizeof err) != 0) {
        fprintf(stderr, "sbemu: %s\n", err);
        emu_ns_free(b.ns);
        if (b.tls)
            pn_ssl_domain_free(b.tls);
        return 2;
    }
    /* Command-line faults override the topology file's. */
    int *dst[] = {&b.faults.drop_after,    &b.faults.drop_every_ms,   &b.faults.refuse_renew,
                  &b.faults.lock_early_ms, &b.faults.settle_delay_ms, &b.faults.drop_settle_reply,
                  &b.faults.ignore_drain,  &b.faults.refuse_set_state,
                  &b.faults.stall_set_state, &b.faults.busy_get_state,
                  &b.faults.busy_set_state, &b.faults.ignore_dead_letter,
                  &b.faults.server_busy_for_ms, &b.faults.server_busy_after,
                  &b.faults.stall_link, &b.faults.stall_links,
                  &b.faults.idle_close_link_ms, &b.faults.idle_close_conn_ms};
    int *src[] = {&cli.drop_after,    &cli.drop_every_ms,   &cli.refuse_renew,
                  &cli.lock_early_ms, &cli.settle_delay_ms, &cli.drop_settle_reply,
                  &cli.ignore_drain,  &cli.refuse_set_state,
                  &cli.stall_set_state, &cli.busy_get_state,
                  &cli.busy_set_state, &cli.ignore_dead_letter,
                  &cli.server_busy_for_ms, &cli.server_busy_after,
                  &cli.stall_link, &cli.stall_links,
                  &cli.idle_close_link_ms, &cli.idle_close_conn_ms};
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++)
        if (*src[i] >= 0)
            *dst[i] = *src[i];
    b.ns->lock_early_ms = b.faults.lock_early_ms;
    b.ns->hooks.ready = emu_broker_on_ready;
    b.ns->hooks.session_lost = emu_broker_on_session_lost;
    b.ns->hooks.ctx = &b;

    char host[256], port[32];
    const char *colon = strrchr(listen, ':');
    if (!colon || (size_t)(colon - listen) >= sizeof host) {
        fprintf(stderr, "sbemu: --listen wants HOST:PORT\n");
        emu_ns_free(b.ns);
        return 2;
    }
    memcpy(host, listen, (size_t)(colon - listen));
    host[colon - listen] = '\0';
    snprintf(port, sizeof port, "%s", colon + 1);
    char addr[300];
    pn_proactor_addr(addr, sizeof addr, host, port);

    /* The proactor thread holds mu while it handles events; the HTTP thread reads under it. */
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    emu_http_t *http = NULL;
    if (http_listen) {
        emu_http_opts_t ho = {http_listen, tls_cert, tls_key, &b, &mu, http_status};
        http = emu_http_start(&ho, &b.http_port, err, sizeof err);
        if (!http) {
            fprintf(stderr, "sbemu: %s\n", err);
            emu_ns_free(b.ns);
            return 1;
        }
    }
    emu_ws_t *ws = NULL;
    if (ws_listen) {
        ws = emu_ws_start(ws_listen, tls_cert, tls_key, &b.amqp_port, &b.ws_port, err, sizeof err);
        if (!ws) {
            fprintf(stderr, "sbemu: %s\n", err);
            emu_http_stop(http);
            emu_ns_free(b.ns);
            return 1;
        }
    }
    pn_logger_set_log_sink(pn_default_logger(), proton_log_sink, 0);
    b.proactor = g_proactor = pn_proactor();
    b.listener = pn_listener();
    pn_proactor_listen(b.proactor, b.listener, addr, 64);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    pn_proactor_set_timeout(b.proactor, 50);
    int status = 0;
    bool running = true;
    while (running) {
        pn_event_batch_t *eb = pn_proactor_wait(b.proactor);
        pn_event_t *e;
        pthread_mutex_lock(&mu);
        b.read_only = g_read_only;
        while ((e = pn_event_batch_next(eb)))
            if (!emu_broker_handle(&b, e)) {
                running = false;
                if (pn_event_type(e) == PN_LISTENER_CLOSE)
                    status = 1;
            }
        pthread_mutex_unlock(&mu);
        pn_proactor_done(b.proactor, eb);
    }
    emu_ws_stop(ws);
    emu_http_stop(http);
    if (b.stats_file)
        emu_stats_write(b.ns, b.stats_file);
    IB_LOG(IB_LOG_INFO, "stop", IB_MSG("sbemu stopped"));
    pn_proactor_free(b.proactor);
    emu_broker_free_conns(&b);
    emu_buf_free(&b.scratch);
    emu_ns_free(b.ns);
    if (b.tls)
        pn_ssl_domain_free(b.tls);
    return status;
}
