/*
 * TLS: sbemu speaks plain TCP only, so the test puts a small TLS-terminating
 * proxy (OpenSSL, a throwaway CA and a certificate for "localhost" made by
 * the test) in front of it. Connecting with that CA configured succeeds and
 * messages flow end to end; without it (system store) the connection fails
 * with IB_E_TLS; with a host name the certificate does not carry it fails
 * with IB_E_TLS too.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "ib_log.h"
#include "sbt.h"

static const char *topology =
    "{\"queues\":[{\"name\":\"secure\",\"lock_duration_s\":5,\"max_delivery_count\":5}]}";

static SSL_CTX *ctx;
static int listen_fd, backend_port;

typedef struct pipe_arg {
    int cfd;
} pipe_arg_t;

/* One proxied connection: TLS from the client, plain TCP to sbemu. */
static void *serve(void *p)
{
    int cfd = ((pipe_arg_t *)p)->cfd, bfd;
    struct sockaddr_in a;
    SSL *ssl = SSL_new(ctx);
    char buf[16384];
    free(p);
    SSL_set_fd(ssl, cfd);
    if (SSL_accept(ssl) != 1)
        goto out; /* the client refused our certificate */
    bfd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)backend_port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(bfd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(bfd);
        goto out;
    }
    for (;;) {
        struct pollfd pf[2] = {{cfd, POLLIN, 0}, {bfd, POLLIN, 0}};
        if (!SSL_pending(ssl) && poll(pf, 2, 1000) < 0)
            break;
        if (SSL_pending(ssl) || (pf[0].revents & (POLLIN | POLLHUP))) {
            int n = SSL_read(ssl, buf, sizeof(buf));
            if (n <= 0 || write(bfd, buf, (size_t)n) != n)
                break;
        }
        if (pf[1].revents & (POLLIN | POLLHUP)) {
            ssize_t n = read(bfd, buf, sizeof(buf));
            if (n <= 0 || SSL_write(ssl, buf, (int)n) != (int)n)
                break;
        }
    }
    close(bfd);
out:
    SSL_free(ssl);
    close(cfd);
    return NULL;
}

static void *acceptor(void *unused)
{
    (void)unused;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        pthread_t t;
        pipe_arg_t *p;
        if (fd < 0)
            return NULL;
        p = malloc(sizeof(*p));
        p->cfd = fd;
        pthread_create(&t, NULL, serve, p);
        pthread_detach(t);
    }
}

static int start_proxy(const char *dir)
{
    char cert[400], key[400];
    struct sockaddr_in a;
    socklen_t al = sizeof(a);
    pthread_t t;
    snprintf(cert, sizeof(cert), "%s/server.pem", dir);
    snprintf(key, sizeof(key), "%s/server.key", dir);
    ctx = SSL_CTX_new(TLS_server_method());
    ASSERT_EQ(SSL_CTX_use_certificate_chain_file(ctx, cert), 1);
    ASSERT_EQ(SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM), 1);
    listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(listen_fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ASSERT_EQ(listen(listen_fd, 16), 0);
    ASSERT_EQ(getsockname(listen_fd, (struct sockaddr *)&a, &al), 0);
    pthread_create(&t, NULL, acceptor, NULL);
    pthread_detach(t);
    return ntohs(a.sin_port);
}

/* A CA and a server certificate for DNS:localhost only. */
static void make_certs(const char *dir)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && printf 'subjectAltName=DNS:localhost\\n' > ext.cnf && "
             "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 "
             "-subj /CN=sbt-test-ca >/dev/null 2>&1 && "
             "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr "
             "-subj /CN=localhost >/dev/null 2>&1 && "
             "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial "
             "-out server.pem -days 1 -extfile ext.cnf >/dev/null 2>&1",
             dir);
    ASSERT_EQ(system(cmd), 0);
}

static sb_sender_t *open_sender(const char *host, int port, const char *ca, ib_error_t *err)
{
    char cs[512];
    sb_sender_options_t so;
    snprintf(cs, sizeof(cs),
             "Endpoint=sb://%s:%d/;SharedAccessKeyName=tester;SharedAccessKey=c2VjcmV0LWtleQ==",
             host, port);
    so = (sb_sender_options_t){cs, ca, NULL, NULL, (unsigned)sbt_ms(5000), 0, 0};
    return sb_sender_open(&so, err);
}

int main(void)
{
    sbt_emu_t emu;
    char ca[400], cs[512];
    int port;
    ib_error_t err;
    sb_sender_t *s;
    sb_out_msg_t m;
    sbt_rx_t rx;
    sb_options_t opt;
    sb_callbacks_t cb;
    sb_client_t *c;
    sb_msg_t *msg;

    ib_log_set_level(getenv("SBT_DEBUG") ? IB_LOG_DEBUG : IB_LOG_OFF);
    sbt_emu_start(&emu, topology, NULL);
    backend_port = emu.port;
    make_certs(emu.dir);
    snprintf(ca, sizeof(ca), "%s/ca.pem", emu.dir);
    port = start_proxy(emu.dir);

    /* With the CA: send over TLS, receive over TLS, complete. */
    s = open_sender("localhost", port, ca, &err);
    if (!s)
        fprintf(stderr, "open with CA: %s\n", err.text);
    ASSERT_TRUE(s);
    memset(&m, 0, sizeof(m));
    m.message_id = "tls-1";
    m.body = "secret";
    m.body_len = 6;
    ASSERT_EQ(sb_sender_send(s, "secure", &m, 1, &err), IB_E_OK);
    sb_sender_close(s);
    ASSERT_EQ(sbt_wait_stat(&emu, "secure", "active", 1, 3000), 1);

    sbt_rx_init(&rx);
    snprintf(
        cs, sizeof(cs),
        "Endpoint=sb://localhost:%d/;SharedAccessKeyName=tester;SharedAccessKey=c2VjcmV0LWtleQ==",
        port);
    sbt_options(&emu, "secure", &opt);
    opt.connection_string = cs;
    opt.ca_file = ca;
    sbt_callbacks(&rx, &cb);
    c = sbt_client_start(&opt, &cb);
    msg = sbt_take(&rx, 10000);
    ASSERT_TRUE(msg);
    ASSERT_STREQ(msg->message_id, "tls-1");
    sb_client_settle(c, msg, SB_COMPLETE, NULL, NULL);
    ASSERT_TRUE(sbt_wait_settled(&rx, 1, 5000));
    ASSERT_EQ(rx.settled_ok, 1);
    ASSERT_EQ(sbt_wait_stat(&emu, "secure", "completed", 1, 3000), 1);
    sb_client_stop(c);
    sb_client_free(c);
    sbt_rx_destroy(&rx);

    /* Without the CA: the system store does not know the test CA. */
    s = open_sender("localhost", port, NULL, &err);
    ASSERT_EQ(s, NULL);
    fprintf(stderr, "without CA: %s: %s\n", ib_err_name(err.code), err.text);
    ASSERT_EQ(err.code, IB_E_TLS);

    /* Wrong host name: the certificate is for localhost, not 127.0.0.1. */
    s = open_sender("127.0.0.1", port, ca, &err);
    ASSERT_EQ(s, NULL);
    fprintf(stderr, "wrong host: %s: %s\n", ib_err_name(err.code), err.text);
    ASSERT_EQ(err.code, IB_E_TLS);

    /* A CA file that does not exist is a configuration error, before connecting. */
    s = open_sender("localhost", port, "/nonexistent/ca.pem", &err);
    ASSERT_EQ(s, NULL);
    ASSERT_EQ(err.code, IB_E_CONFIG);
    ASSERT_NE(strstr(err.text, "servicebus.ca_file"), NULL);

    shutdown(listen_fd, SHUT_RDWR);
    close(listen_fd);
    sbt_emu_stop(&emu);
    SSL_CTX_free(ctx);
    fprintf(stderr, "ok   tls\n");
    return 0;
}
