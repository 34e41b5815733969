/*
 * test_wkops_http.c - the operations endpoints over real loopback sockets:
 * liveness and readiness transitions, /metrics, error statuses, and that
 * slow, oversized or numerous clients cannot starve a well-behaved one.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "ib_log.h"
#include "ib_test.h"
#include "wk_health.h"
#include "wk_metrics.h"

static int connect_to(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct timeval tv = {(long)ib_test_timeout(10), 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

/* Reads until EOF into resp; returns the status code, or -1. */
static int read_response(int fd, char *resp, size_t size)
{
    size_t n = 0;
    for (;;) {
        ssize_t k = recv(fd, resp + n, size - 1 - n, 0);
        if (k <= 0)
            break;
        n += (size_t)k;
        if (n == size - 1)
            break;
    }
    resp[n] = '\0';
    int status = -1;
    if (sscanf(resp, "HTTP/1.1 %d ", &status) != 1)
        return -1;
    return status;
}

/* Sends raw as one request and returns the status; resp gets the whole response. */
static int exchange(int port, const char *raw, char *resp, size_t size)
{
    int fd = connect_to(port);
    if (fd < 0)
        return -1;
    if (send(fd, raw, strlen(raw), MSG_NOSIGNAL) != (ssize_t)strlen(raw)) {
        close(fd);
        return -1;
    }
    int status = read_response(fd, resp, size);
    close(fd);
    return status;
}

static int get(int port, const char *path, char *resp, size_t size)
{
    char raw[256];
    snprintf(raw, sizeof raw, "GET %s HTTP/1.1\r\nHost: test\r\nUser-Agent: t\r\n\r\n", path);
    return exchange(port, raw, resp, size);
}

static const char *body_of(const char *resp)
{
    const char *b = strstr(resp, "\r\n\r\n");
    return b ? b + 4 : "";
}

/* The clock the liveness and deadline tests step instead of sleeping. */
static _Atomic long long test_now = 1000000;
static long long test_clock(void *ctx)
{
    (void)ctx;
    return test_now;
}

/* Whether fd has something to read (a response, or EOF) right now. */
static bool readable_now(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

static wk_health_t *start(wk_health_opts_t o)
{
    ib_error_t err;
    if (!o.listen)
        o.listen = "127.0.0.1:0";
    wk_health_t *h = wk_health_start(&o, &err);
    if (!h)
        fprintf(stderr, "wk_health_start: %s\n", err.text);
    return h;
}

static void test_disabled(void)
{
    ib_error_t err;
    wk_health_opts_t o = {.listen = ""};
    wk_health_t *h = wk_health_start(&o, &err);
    ASSERT_TRUE(h != NULL);
    ASSERT_EQ(wk_health_port(h), 0);
    ASSERT_TRUE(wk_health_is_live(h));
    ASSERT_TRUE(!wk_health_is_ready(h, NULL, 0));
    for (int c = 0; c < WK_HEALTH__COND_COUNT; c++)
        wk_health_set_condition(h, (wk_health_cond_t)c, true);
    ASSERT_TRUE(wk_health_is_ready(h, NULL, 0));
    wk_health_stop(h);
    /* Every setter accepts the NULL a failed start leaves behind. */
    wk_health_heartbeat(NULL);
    wk_health_set_condition(NULL, WK_HEALTH_DB_REACHABLE, true);
    wk_health_set_draining(NULL, true);
    wk_health_stop(NULL);
}

static void test_bad_listen(void)
{
    ib_error_t err;
    const char *bad[] = {"nonsense",     "127.0.0.1:", "127.0.0.1:99999",
                         "127.0.0.1:9x", "[::1]9090",  "::1:9090"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        wk_health_opts_t o = {.listen = bad[i]};
        ib_error_clear(&err);
        ASSERT_TRUE(wk_health_start(&o, &err) == NULL);
        ASSERT_EQ(err.code, IB_E_CONFIG);
        ASSERT_CONTAINS(err.text, "http.listen");
    }
    /* A port already bound is an I/O error naming the address. */
    wk_health_t *h = start((wk_health_opts_t){0});
    ASSERT_TRUE(h != NULL);
    char addr[64];
    snprintf(addr, sizeof addr, "127.0.0.1:%d", wk_health_port(h));
    wk_health_opts_t o = {.listen = addr};
    ASSERT_TRUE(wk_health_start(&o, &err) == NULL);
    ASSERT_EQ(err.code, IB_E_IO);
    ASSERT_CONTAINS(err.text, addr);
    wk_health_stop(h);
}

static void test_ipv6_listen(void)
{
    /* "[v6]:port" form; skipped where the machine has no IPv6 loopback. */
    ib_error_t err;
    wk_health_opts_t o = {.listen = "[::1]:0"};
    wk_health_t *h = wk_health_start(&o, &err);
    if (!h && err.code == IB_E_IO) {
        fprintf(stderr, "skip test_ipv6_listen: %s\n", err.text);
        return;
    }
    ASSERT_TRUE(h != NULL);
    ASSERT_TRUE(wk_health_port(h) > 0);
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6,
                              .sin6_port = htons((unsigned short)wk_health_port(h))};
    sa.sin6_addr = in6addr_loopback;
    ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char *req = "GET /healthz HTTP/1.1\r\n\r\n";
    ASSERT_EQ(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    char resp[512];
    ASSERT_EQ(read_response(fd, resp, sizeof resp), 200);
    close(fd);
    wk_health_stop(h);
}

static void test_liveness(void)
{
    char resp[4096];
    wk_health_t *h = start(
        (wk_health_opts_t){.heartbeat_max_age_ms = 300, .clock_ms = test_clock}); /* beat: now */
    ASSERT_TRUE(h != NULL);
    ASSERT_TRUE(wk_health_port(h) > 0);
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    ASSERT_STREQ(body_of(resp), "ok\n");
    test_now += 300; /* the oldest a heartbeat may be */
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    ASSERT_TRUE(wk_health_is_live(h));
    test_now += 1;
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 503);
    ASSERT_CONTAINS(body_of(resp), "event loop stalled");
    ASSERT_TRUE(!wk_health_is_live(h));
    wk_health_heartbeat(h);
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    /* Draining does not make the process dead. */
    wk_health_set_draining(h, true);
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    wk_health_stop(h);
}

static void test_readiness(void)
{
    char resp[4096];
    wk_health_t *h = start((wk_health_opts_t){0});
    ASSERT_TRUE(h != NULL);
    int port = wk_health_port(h);
    ASSERT_EQ(get(port, "/readyz", resp, sizeof resp), 503);
    ASSERT_STREQ(body_of(resp),
                 "not ready: amqp not connected; links not attached; database unreachable\n");
    wk_health_set_condition(h, WK_HEALTH_AMQP_CONNECTED, true);
    wk_health_set_condition(h, WK_HEALTH_LINKS_ATTACHED, true);
    ASSERT_EQ(get(port, "/readyz", resp, sizeof resp), 503);
    ASSERT_STREQ(body_of(resp), "not ready: database unreachable\n");
    wk_health_set_condition(h, WK_HEALTH_DB_REACHABLE, true);
    ASSERT_EQ(get(port, "/readyz", resp, sizeof resp), 200);
    ASSERT_STREQ(body_of(resp), "ready\n");
    ASSERT_CONTAINS(resp, "Content-Length: 6\r\n");
    ASSERT_CONTAINS(resp, "Connection: close\r\n");
    /* A query string does not change the route. */
    ASSERT_EQ(get(port, "/readyz?verbose=1", resp, sizeof resp), 200);
    wk_health_set_draining(h, true);
    ASSERT_EQ(get(port, "/readyz", resp, sizeof resp), 503);
    ASSERT_STREQ(body_of(resp), "not ready: draining\n");
    wk_health_set_draining(h, false);
    wk_health_set_condition(h, WK_HEALTH_DB_REACHABLE, false);
    ASSERT_EQ(get(port, "/readyz", resp, sizeof resp), 503);
    wk_health_stop(h);
}

static void test_metrics(void)
{
    char resp[16384];
    wk_metrics_t *m = wk_metrics_new("9.9.9");
    wk_health_t *h = start((wk_health_opts_t){.metrics = m});
    ASSERT_TRUE(h != NULL);
    int port = wk_health_port(h);
    ASSERT_EQ(get(port, "/metrics", resp, sizeof resp), 200);
    ASSERT_CONTAINS(resp, "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n");
    ASSERT_CONTAINS(body_of(resp), "inboxd_messages_total{result=\"applied\"} 0\n");
    ASSERT_CONTAINS(body_of(resp), "inboxd_build_info{version=\"9.9.9\"} 1\n");
    for (int i = 0; i < 7; i++)
        wk_metrics_message(m, WK_OUT_APPLIED);
    wk_metrics_dead_letter(m, "NoRoute", IB_CLASS_PERMANENT);
    ASSERT_EQ(get(port, "/metrics", resp, sizeof resp), 200);
    ASSERT_CONTAINS(body_of(resp), "inboxd_messages_total{result=\"applied\"} 7\n");
    ASSERT_CONTAINS(body_of(resp),
                    "inboxd_dead_letters_total{reason=\"NoRoute\",class=\"permanent\"} 1\n");
    /* Content-Length matches the body exactly. */
    size_t clen = 0;
    const char *cl = strstr(resp, "Content-Length: ");
    ASSERT_TRUE(cl != NULL);
    clen = (size_t)atol(cl + 16);
    ASSERT_EQ(clen, strlen(body_of(resp)));
    wk_health_stop(h);
    wk_metrics_free(m);
}

static void test_errors(void)
{
    char resp[4096];
    wk_health_t *h = start((wk_health_opts_t){0}); /* no metrics registry */
    ASSERT_TRUE(h != NULL);
    int port = wk_health_port(h);
    ASSERT_EQ(get(port, "/nope", resp, sizeof resp), 404);
    ASSERT_EQ(get(port, "/metrics", resp, sizeof resp), 404);
    ASSERT_EQ(get(port, "/healthzz", resp, sizeof resp), 404);
    ASSERT_EQ(
        exchange(port, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", resp, sizeof resp),
        405);
    ASSERT_CONTAINS(resp, "Allow: GET, HEAD\r\n");
    ASSERT_EQ(exchange(port, "garbage\r\n\r\n", resp, sizeof resp), 400);
    ASSERT_EQ(exchange(port, "GET /healthz SPDY/9\r\n\r\n", resp, sizeof resp), 400);
    /* HEAD: the same headers, no body. */
    ASSERT_EQ(exchange(port, "HEAD /healthz HTTP/1.1\r\n\r\n", resp, sizeof resp), 200);
    ASSERT_CONTAINS(resp, "Content-Length: 3\r\n");
    ASSERT_STREQ(body_of(resp), "");
    /* HTTP/1.0 and bare LF line ends are accepted. */
    ASSERT_EQ(exchange(port, "GET /healthz HTTP/1.0\n\n", resp, sizeof resp), 200);
    wk_health_stop(h);
}

static void test_oversize_request(void)
{
    char resp[4096];
    wk_health_t *h = start((wk_health_opts_t){.max_request_bytes = 8192});
    ASSERT_TRUE(h != NULL);
    size_t big = 20000;
    char *raw = malloc(big + 64);
    strcpy(raw, "GET /healthz HTTP/1.1\r\nX-Pad: ");
    size_t n = strlen(raw);
    memset(raw + n, 'a', big);
    strcpy(raw + n + big, "\r\n\r\n");
    int fd = connect_to(wk_health_port(h));
    ASSERT_TRUE(fd >= 0);
    /* The server may answer and stop reading before all of it is sent. */
    ssize_t sent = send(fd, raw, strlen(raw), MSG_NOSIGNAL);
    ASSERT_TRUE(sent > 8192);
    int status = read_response(fd, resp, sizeof resp);
    close(fd);
    free(raw);
    ASSERT_EQ(status, 431);
    /* The server is still serving afterwards. */
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    wk_health_stop(h);
}

static double elapsed_s(struct timespec a)
{
    struct timespec b;
    clock_gettime(CLOCK_MONOTONIC, &b);
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

static void test_slow_client_does_not_block_others(void)
{
    char resp[4096];
    wk_health_t *h = start((wk_health_opts_t){.read_timeout_ms = 1500, .clock_ms = test_clock});
    ASSERT_TRUE(h != NULL);
    int port = wk_health_port(h);
    /* A slowloris: half a request line, then silence. */
    int slow = connect_to(port);
    ASSERT_TRUE(slow >= 0);
    ASSERT_EQ(send(slow, "GET /hea", 8, MSG_NOSIGNAL), 8);
    /* Served while the slow client holds its connection (the server's clock
     * stands still: its deadline cannot pass). The request also wakes the
     * server, which expires what is due before it answers. */
    ASSERT_EQ(get(port, "/healthz", resp, sizeof resp), 200);
    ASSERT_TRUE(!readable_now(slow));
    test_now += 1499;
    ASSERT_EQ(get(port, "/healthz", resp, sizeof resp), 200);
    ASSERT_TRUE(!readable_now(slow)); /* a millisecond before its deadline: still waited for */
    /* The slow client is cut off at its deadline with 408, not left open. */
    test_now += 1;
    ASSERT_EQ(get(port, "/healthz", resp, sizeof resp), 200);
    int status = read_response(slow, resp, sizeof resp);
    close(slow);
    ASSERT_EQ(status, 408);
    wk_health_stop(h);
}

/* How many of fds the server has closed (EOF readable now). */
static int count_closed(const int *fds, int n)
{
    int closed = 0;
    for (int i = 0; i < n; i++) {
        char c;
        if (readable_now(fds[i]) && recv(fds[i], &c, 1, MSG_DONTWAIT | MSG_PEEK) <= 0)
            closed++;
    }
    return closed;
}

static void test_connection_flood_does_not_lock_out(void)
{
    char resp[4096];
    enum { MAXC = 4, IDLE = 12 };
    /* The clock stands still: the idle clients' deadline never comes to the rescue. */
    wk_health_t *h = start((wk_health_opts_t){
        .max_connections = MAXC, .read_timeout_ms = 20000, .clock_ms = test_clock});
    ASSERT_TRUE(h != NULL);
    int port = wk_health_port(h);
    int idle[IDLE];
    for (int i = 0; i < IDLE; i++) {
        idle[i] = connect_to(port);
        ASSERT_TRUE(idle[i] >= 0);
    }
    /* Answered (accepted after them, so they were accepted or evicted first). */
    ASSERT_EQ(get(port, "/healthz", resp, sizeof resp), 200);
    /* At most MAXC idle connections are still held: the rest were closed (EOF). */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int closed;
    while ((closed = count_closed(idle, IDLE)) < IDLE - MAXC && elapsed_s(t0) < ib_test_timeout(5))
        poll(NULL, 0, 20); /* the FINs are on their way over loopback */
    ASSERT_TRUE(closed >= IDLE - MAXC);
    for (int i = 0; i < IDLE; i++)
        close(idle[i]);
    wk_health_stop(h);
}

static void test_stop_with_open_connections(void)
{
    wk_health_t *h = start((wk_health_opts_t){0});
    ASSERT_TRUE(h != NULL);
    int fd = connect_to(wk_health_port(h));
    ASSERT_TRUE(fd >= 0);
    ASSERT_EQ(send(fd, "GET /", 5, MSG_NOSIGNAL), 5);
    char resp[4096]; /* answered after it: the half-sent one is accepted and held */
    ASSERT_EQ(get(wk_health_port(h), "/healthz", resp, sizeof resp), 200);
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    wk_health_stop(h); /* must not wait for the half-sent request (5 s deadline) */
    ASSERT_TRUE(elapsed_s(t0) < ib_test_timeout(1));
    char c;
    ASSERT_TRUE(recv(fd, &c, 1, 0) <= 0);
    close(fd);
}

int main(void)
{
    ib_log_set_level(IB_LOG_WARN);
    RUN(test_disabled);
    RUN(test_bad_listen);
    RUN(test_ipv6_listen);
    RUN(test_liveness);
    RUN(test_readiness);
    RUN(test_metrics);
    RUN(test_errors);
    RUN(test_oversize_request);
    RUN(test_slow_client_does_not_block_others);
    RUN(test_connection_flood_does_not_lock_out);
    RUN(test_stop_with_open_connections);
    return ib_test_done();
}
