/*
 * bench_sbemu.c - how fast sbemu stores, dispatches and settles, and how
 * much memory a deep queue costs it.
 *
 *   sbemu_bench PATH/TO/sbemu [messages=100000] [body_bytes=1024]
 *
 * Starts sbemu (no key, one queue), then with one Proton connection:
 *   1. sends `messages` messages of `body_bytes` (unsettled, waits for every
 *      broker accept) and reports send msg/s;
 *   2. reads sbemu's VmRSS with all of them queued;
 *   3. receives them in peek-lock (credit 1000), completes each one, counts
 *      a message done when the broker's settled reply arrives, and reports
 *      dispatch+settle msg/s.
 * Output: one JSON object per phase on stdout.
 *
 * thread: main only (one proactor, one connection).
 */
#include <proton/connection.h>
#include <proton/delivery.h>
#include <proton/link.h>
#include <proton/message.h>
#include <proton/proactor.h>
#include <proton/sasl.h>
#include <proton/session.h>
#include <proton/terminus.h>
#include <proton/transport.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct bench {
    pn_proactor_t *proactor;
    pn_connection_t *conn;
    pn_session_t *ssn;
    pn_link_t *snd, *rcv;
    long total, sent, acked, received, settled;
    size_t body_bytes;
    char *msgbuf;
    size_t msglen;
    double t_send0, t_send1, t_recv0, t_recv1;
    pid_t emu_pid;
    long rss_empty_kib, rss_full_kib;
    int phase; /* 0 sending, 1 receiving, 2 done */
    int failed;
} bench_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *fp = fopen(path, "r");
    long kib = -1;
    if (!fp)
        return -1;
    while (fgets(line, sizeof line, fp))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(fp);
    return kib;
}

/* Encodes one message with a fresh message-id into b->msgbuf. */
static void encode(bench_t *b, long i)
{
    static pn_message_t *m;
    static char *body;
    if (!m) {
        m = pn_message();
        body = malloc(b->body_bytes);
        memset(body, 'x', b->body_bytes);
        b->msgbuf = malloc(b->body_bytes + 1024);
    }
    pn_message_clear(m);
    char id[32];
    snprintf(id, sizeof id, "bench-%ld", i);
    pn_data_t *idd = pn_message_id(m);
    pn_data_put_string(idd, pn_bytes(strlen(id), id));
    pn_data_t *bd = pn_message_body(m);
    pn_data_put_binary(bd, pn_bytes(b->body_bytes, body));
    b->msglen = b->body_bytes + 1024;
    if (pn_message_encode(m, b->msgbuf, &b->msglen) != 0) {
        fprintf(stderr, "encode failed\n");
        exit(1);
    }
}

static void send_some(bench_t *b)
{
    while (b->sent < b->total && pn_link_credit(b->snd) > 0) {
        char tag[16];
        int n = snprintf(tag, sizeof tag, "%ld", b->sent);
        pn_delivery(b->snd, pn_dtag(tag, (size_t)n));
        encode(b, b->sent);
        pn_link_send(b->snd, b->msgbuf, b->msglen);
        pn_link_advance(b->snd);
        b->sent++;
    }
}

static void open_receiver(bench_t *b)
{
    b->rcv = pn_receiver(b->ssn, "bench-receiver");
    pn_terminus_set_address(pn_link_source(b->rcv), "bench");
    pn_link_set_snd_settle_mode(b->rcv, PN_SND_UNSETTLED);
    pn_link_set_rcv_settle_mode(b->rcv, PN_RCV_SECOND);
    pn_link_open(b->rcv);
    pn_link_flow(b->rcv, 1000);
    b->t_recv0 = now_s();
}

static void handle(bench_t *b, pn_event_t *e)
{
    switch (pn_event_type(e)) {
    case PN_CONNECTION_INIT: {
        pn_connection_t *c = pn_event_connection(e);
        pn_connection_set_container(c, "sbemu-bench");
        pn_connection_open(c);
        b->ssn = pn_session(c);
        pn_session_open(b->ssn);
        b->snd = pn_sender(b->ssn, "bench-sender");
        pn_terminus_set_address(pn_link_target(b->snd), "bench");
        pn_link_open(b->snd);
        b->t_send0 = now_s();
        break;
    }
    case PN_LINK_FLOW:
        if (pn_event_link(e) == b->snd && b->phase == 0)
            send_some(b);
        break;
    case PN_DELIVERY: {
        pn_delivery_t *d = pn_event_delivery(e);
        pn_link_t *l = pn_delivery_link(d);
        if (l == b->snd) {
            if (pn_delivery_updated(d) && pn_delivery_settled(d)) {
                if (pn_delivery_remote_state(d) != PN_ACCEPTED)
                    b->failed = 1;
                pn_delivery_settle(d);
                if (++b->acked == b->total) {
                    b->t_send1 = now_s();
                    usleep(300000); /* let the allocator settle before reading RSS */
                    b->rss_full_kib = rss_kib(b->emu_pid);
                    b->phase = 1;
                    open_receiver(b);
                }
            }
        } else if (l == b->rcv) {
            if (pn_delivery_readable(d) && !pn_delivery_partial(d) && !pn_delivery_local_state(d)) {
                char sink[4096];
                while (pn_link_recv(l, sink, sizeof sink) > 0) {
                }
                pn_link_advance(l);
                b->received++;
                pn_delivery_update(d, PN_ACCEPTED); /* complete; the broker settles */
            } else if (pn_delivery_settled(d)) {
                if (pn_delivery_remote_state(d) != PN_ACCEPTED)
                    b->failed = 1;
                pn_delivery_settle(d);
                b->settled++;
                pn_link_flow(l, 1);
                if (b->settled == b->total) {
                    b->t_recv1 = now_s();
                    b->phase = 2;
                    pn_connection_close(pn_event_connection(e));
                }
            }
        }
        break;
    }
    case PN_TRANSPORT_CLOSED:
        if (b->phase != 2) {
            pn_condition_t *c = pn_transport_condition(pn_event_transport(e));
            fprintf(stderr, "bench: connection closed early: %s %s\n", pn_condition_get_name(c),
                    pn_condition_get_description(c));
            b->failed = 1;
        }
        b->phase = 3;
        break;
    default:
        break;
    }
}

static pid_t start_sbemu(const char *exe, const char *topo, int *port)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        execl(exe, exe, "--listen", "127.0.0.1:0", "--topology", topo, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *fp = fdopen(fds[0], "r");
    char line[256];
    if (!fp || !fgets(line, sizeof line, fp) ||
        sscanf(line, "{\"event\":\"listening\",\"port\":%d}", port) != 1)
        return -1;
    return pid; /* the pipe stays open: sbemu logs warnings only */
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/TO/sbemu [messages] [body_bytes]\n", argv[0]);
        return 2;
    }
    bench_t b;
    memset(&b, 0, sizeof b);
    b.total = argc > 2 ? atol(argv[2]) : 100000;
    b.body_bytes = argc > 3 ? (size_t)atol(argv[3]) : 1024;
    char topo[] = "/tmp/sbemu-bench-XXXXXX";
    int tfd = mkstemp(topo);
    const char *tjson = "{\"queues\":[{\"name\":\"bench\",\"lock_duration_s\":300}]}";
    if (tfd < 0 || write(tfd, tjson, strlen(tjson)) != (ssize_t)strlen(tjson))
        return 1;
    close(tfd);
    int port = 0;
    b.emu_pid = start_sbemu(argv[1], topo, &port);
    if (b.emu_pid <= 0) {
        fprintf(stderr, "bench: could not start %s\n", argv[1]);
        return 1;
    }
    b.rss_empty_kib = rss_kib(b.emu_pid);
    b.proactor = pn_proactor();
    b.conn = pn_connection();
    pn_transport_t *t = pn_transport();
    pn_sasl_allowed_mechs(pn_sasl(t), "ANONYMOUS");
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
    pn_proactor_connect2(b.proactor, b.conn, t, addr);
    while (b.phase < 3) {
        pn_event_batch_t *eb = pn_proactor_wait(b.proactor);
        pn_event_t *e;
        while ((e = pn_event_batch_next(eb)))
            handle(&b, e);
        pn_proactor_done(b.proactor, eb);
    }
    pn_proactor_free(b.proactor);
    kill(b.emu_pid, SIGTERM);
    int status = 0;
    waitpid(b.emu_pid, &status, 0);
    unlink(topo);
    if (b.failed || b.settled != b.total) {
        fprintf(stderr, "bench: failed (settled %ld of %ld)\n", b.settled, b.total);
        return 1;
    }
    printf("{\"phase\":\"send\",\"messages\":%ld,\"body_bytes\":%zu,\"seconds\":%.3f,\"msg_per_s\":"
           "%.0f}\n",
           b.total, b.body_bytes, b.t_send1 - b.t_send0, b.total / (b.t_send1 - b.t_send0));
    printf(
        "{\"phase\":\"queued\",\"messages\":%ld,\"rss_empty_mib\":%.1f,\"rss_queued_mib\":%.1f}\n",
        b.total, b.rss_empty_kib / 1024.0, b.rss_full_kib / 1024.0);
    printf("{\"phase\":\"dispatch_settle\",\"messages\":%ld,\"seconds\":%.3f,\"msg_per_s\":%.0f}\n",
           b.total, b.t_recv1 - b.t_recv0, b.total / (b.t_recv1 - b.t_recv0));
    printf("{\"phase\":\"exit\",\"sbemu_status\":%d}\n",
           WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 0;
}
