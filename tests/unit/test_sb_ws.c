/*
 * The WebSocket codec (sb_ws.h): the handshake both ways with its refusals
 * (401, 407 naming the proxy, wrong accept, missing subprotocol), frames of
 * every length class masked and not, read in chunks of any size, fragments
 * with a ping between them, and each frame a peer must not send.
 */
#include <stdint.h>
#include <string.h>

#include "ib_test.h"
#include "sb_ws.h"

static const uint8_t MASK[4] = {0x37, 0xfa, 0x21, 0x3d};

static void test_accept_rfc_example(void)
{
    char accept[29];
    char key[25];
    uint8_t nonce[16];

    /* RFC 6455 1.3's example. */
    sb_ws_accept_make(accept, "dGhlIHNhbXBsZSBub25jZQ==");
    ASSERT_STREQ(accept, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    memcpy(nonce, "the sample nonce", 16);
    sb_ws_key_make(key, nonce);
    ASSERT_STREQ(key, "dGhlIHNhbXBsZSBub25jZQ==");
}

static void test_handshake_round_trip(void)
{
    char req[1024], ans[1024], key[25];
    const char *k = "dGhlIHNhbXBsZSBub25jZQ==";
    size_t n, used = 0;
    int offered = 0;
    ib_error_t err;

    n = sb_ws_request_format(req, sizeof(req), "ns.servicebus.windows.net", 443, SB_WS_PATH, k,
                             SB_WS_PROTOCOL);
    ASSERT_CONTAINS(req, "GET /$servicebus/websocket/ HTTP/1.1\r\n");
    ASSERT_CONTAINS(req, "Host: ns.servicebus.windows.net\r\n");
    ASSERT_CONTAINS(req, "Sec-WebSocket-Protocol: AMQPWSB10\r\n");
    ASSERT_EQ(sb_ws_request_check(req, n - 1, SB_WS_PROTOCOL, key, &offered, &used, &err),
              IB_E_AGAIN);
    ASSERT_EQ(sb_ws_request_check(req, n, SB_WS_PROTOCOL, key, &offered, &used, &err), IB_E_OK);
    ASSERT_EQ(used, n);
    ASSERT_STREQ(key, k);
    ASSERT_EQ(offered, 1);
    sb_ws_request_format(req, sizeof(req), "127.0.0.1", 8443, "/x", k, SB_WS_PROTOCOL);
    ASSERT_CONTAINS(req, "Host: 127.0.0.1:8443\r\n");

    n = sb_ws_answer_format(ans, sizeof(ans), key, SB_WS_PROTOCOL);
    memcpy(ans + n, "\x82\x00", 2); /* a frame right behind the header */
    for (size_t cut = 0; cut < n; cut++)
        ASSERT_EQ(sb_ws_answer_check(ans, cut, k, SB_WS_PROTOCOL, NULL, &used, &err), IB_E_AGAIN);
    ASSERT_EQ(sb_ws_answer_check(ans, n + 2, k, SB_WS_PROTOCOL, NULL, &used, &err), IB_E_OK);
    ASSERT_EQ(used, n);
}

static ib_err_t check(const char *answer, ib_error_t *err)
{
    size_t used;
    return sb_ws_answer_check(answer, strlen(answer), "dGhlIHNhbXBsZSBub25jZQ==", SB_WS_PROTOCOL,
                              "proxy.corp:3128", &used, err);
}

#define GOOD_ACCEPT "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
#define UPGRADE "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"

static void test_handshake_refusals(void)
{
    ib_error_t err;

    ASSERT_EQ(check(UPGRADE GOOD_ACCEPT "Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n", &err),
              IB_E_OK);
    ASSERT_EQ(check(UPGRADE GOOD_ACCEPT "\r\n", &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "did not agree to subprotocol AMQPWSB10");
    ASSERT_EQ(check(UPGRADE GOOD_ACCEPT "Sec-WebSocket-Protocol: amqp\r\n\r\n", &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "subprotocol AMQPWSB10");
    ASSERT_EQ(check(UPGRADE "Sec-WebSocket-Accept: AAAAPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
                            "Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n",
                    &err),
              IB_E_IO);
    ASSERT_CONTAINS(err.text, "Sec-WebSocket-Accept does not match");
    ASSERT_EQ(check("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n" GOOD_ACCEPT
                    "Sec-WebSocket-Protocol: AMQPWSB10\r\n\r\n",
                    &err),
              IB_E_IO);
    ASSERT_EQ(check(UPGRADE GOOD_ACCEPT "Sec-WebSocket-Protocol: AMQPWSB10\r\n"
                                        "Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n",
                    &err),
              IB_E_IO);
    ASSERT_EQ(check("HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n", &err), IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "401 Unauthorized");
    ASSERT_EQ(err.cls, IB_CLASS_PERMANENT);
    ASSERT_EQ(check("HTTP/1.1 407 Proxy Authentication Required\r\n\r\n", &err), IB_E_AUTH);
    ASSERT_CONTAINS(err.text, "proxy proxy.corp:3128");
    ASSERT_CONTAINS(err.text, "407");
    ASSERT_EQ(check("HTTP/1.1 503 Service Unavailable\r\n\r\n", &err), IB_E_IO);
    ASSERT_EQ(err.cls, IB_CLASS_TRANSIENT);
    ASSERT_CONTAINS(err.text, "503");
    ASSERT_EQ(check("SSH-2.0-OpenSSH_9.2\r\n\r\n", &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "not HTTP");
}

static void test_handshake_too_long(void)
{
    static char big[SB_WS_HEAD_MAX + 16];
    ib_error_t err;
    size_t used;

    memset(big, 'x', sizeof(big));
    memcpy(big, "HTTP/1.1 101 Switching Protocols\r\nX: ", 37);
    ASSERT_EQ(sb_ws_answer_check(big, sizeof(big), "k", SB_WS_PROTOCOL, NULL, &used, &err),
              IB_E_IO);
    ASSERT_CONTAINS(err.text, "longer than 8192");
}

/* A frame of opcode with len bytes of a counting pattern into buf. */
static size_t frame(uint8_t *buf, int opcode, size_t len, int fin, const uint8_t *mask)
{
    size_t h = sb_ws_head_encode(buf, opcode, len, mask);
    if (!fin)
        buf[0] &= 0x7f;
    for (size_t i = 0; i < len; i++)
        buf[h + i] = (uint8_t)(i * 7 + 3);
    if (mask)
        sb_ws_mask(buf + h, len, mask, 0);
    return h + len;
}

/* Reads buf in chunks of step bytes; data into out, control events counted. */
static ib_err_t read_all(sb_ws_dec_t *dec, uint8_t *buf, size_t n, size_t step, uint8_t *out,
                         size_t *out_len, int *pings, ib_error_t *err)
{
    size_t pos = 0;

    *out_len = 0;
    while (pos < n) {
        size_t chunk = n - pos < step ? n - pos : step, off = 0, used;
        sb_ws_ev_t ev;
        do {
            if (sb_ws_dec_next(dec, buf + pos + off, chunk - off, &used, &ev, err) != IB_E_OK)
                return err->code;
            off += used;
            if (ev.kind == SB_WS_EV_DATA) {
                memcpy(out + *out_len, ev.data, ev.len);
                *out_len += ev.len;
            } else if (ev.kind == SB_WS_EV_PING) {
                (*pings)++;
            }
        } while (off < chunk || ev.kind != SB_WS_EV_NONE);
        pos += chunk;
    }
    return IB_E_OK;
}

static void test_frames_every_length(void)
{
    static const size_t lens[] = {0, 1, 125, 126, 127, 65535, 65536, 300001};
    static const size_t steps[] = {1, 3, 13, 4096, 1 << 20};
    static uint8_t buf[300100], out[300100];
    uint8_t head[SB_WS_FRAME_HEAD_MAX];
    ib_error_t err;

    ASSERT_EQ(sb_ws_head_encode(head, SB_WS_OP_BINARY, 125, NULL), 2);
    ASSERT_EQ(sb_ws_head_encode(head, SB_WS_OP_BINARY, 126, MASK), 8);
    ASSERT_EQ(sb_ws_head_encode(head, SB_WS_OP_BINARY, 65536, MASK), 14);
    for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
        for (int server = 0; server < 2; server++) {
            size_t n = frame(buf, SB_WS_OP_BINARY, lens[l], 1, server ? MASK : NULL);
            size_t step = steps[l % 5], got;
            int pings = 0;
            sb_ws_dec_t dec;
            sb_ws_dec_init(&dec, server, 0);
            ASSERT_EQ(read_all(&dec, buf, n, step, out, &got, &pings, &err), IB_E_OK);
            ASSERT_EQ(got, lens[l]);
            for (size_t i = 0; i < got; i++)
                if (out[i] != (uint8_t)(i * 7 + 3))
                    IB_FAIL_("length %zu byte %zu differs", lens[l], i);
        }
    }
}

static void test_fragments_and_ping(void)
{
    static uint8_t buf[4096], out[4096];
    size_t n = 0, got;
    int pings = 0;
    sb_ws_dec_t dec;
    ib_error_t err;

    n += frame(buf + n, SB_WS_OP_BINARY, 100, 0, NULL);
    n += frame(buf + n, SB_WS_OP_PING, 5, 1, NULL);
    n += frame(buf + n, SB_WS_OP_CONT, 0, 0, NULL);
    n += frame(buf + n, SB_WS_OP_CONT, 200, 1, NULL);
    n += frame(buf + n, SB_WS_OP_BINARY, 10, 1, NULL);
    for (size_t step = 1; step <= n; step += 17) {
        sb_ws_dec_init(&dec, 0, 0);
        pings = 0;
        ASSERT_EQ(read_all(&dec, buf, n, step, out, &got, &pings, &err), IB_E_OK);
        ASSERT_EQ(got, 310);
        ASSERT_EQ(pings, 1);
    }
}

static void test_control_events(void)
{
    uint8_t buf[256], payload[] = {0x03, 0xe8, 'b', 'y', 'e'};
    size_t n, used;
    sb_ws_ev_t ev;
    sb_ws_dec_t dec;
    ib_error_t err;

    n = sb_ws_control_encode(buf, SB_WS_OP_PING, (const uint8_t *)"hello", 5, MASK);
    sb_ws_dec_init(&dec, 1, 0);
    ASSERT_EQ(sb_ws_dec_next(&dec, buf, n, &used, &ev, &err), IB_E_OK);
    ASSERT_EQ(ev.kind, SB_WS_EV_PING);
    ASSERT_EQ(ev.len, 5);
    ASSERT_TRUE(memcmp(ev.data, "hello", 5) == 0);

    n = sb_ws_control_encode(buf, SB_WS_OP_CLOSE, payload, sizeof(payload), NULL);
    memcpy(buf + n, "\x82\x00", 2);
    sb_ws_dec_init(&dec, 0, 0);
    ASSERT_EQ(sb_ws_dec_next(&dec, buf, n + 2, &used, &ev, &err), IB_E_OK);
    ASSERT_EQ(ev.kind, SB_WS_EV_CLOSE);
    ASSERT_EQ(ev.close_code, 1000);
    ASSERT_EQ(used, n);
    ASSERT_EQ(sb_ws_dec_next(&dec, buf + n, 2, &used, &ev, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "after the close");
}

/* Feeds raw bytes to a fresh decoder; the result. */
static ib_err_t feed(int server, const char *bytes, size_t n, uint64_t limit, sb_ws_dec_t *dec,
                     ib_error_t *err)
{
    uint8_t buf[512];
    size_t pos = 0, used;
    sb_ws_ev_t ev;

    memcpy(buf, bytes, n);
    sb_ws_dec_init(dec, server, limit);
    while (pos < n) {
        if (sb_ws_dec_next(dec, buf + pos, n - pos, &used, &ev, err) != IB_E_OK)
            return err->code;
        pos += used;
    }
    return IB_E_OK;
}

static void test_frame_refusals(void)
{
    sb_ws_dec_t dec;
    ib_error_t err;

    ASSERT_EQ(feed(0, "\x82\x81\x01\x02\x03\x04x", 7, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "masked frame from the server");
    ASSERT_EQ(feed(1, "\x82\x01x", 3, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "unmasked frame from the client");
    ASSERT_EQ(feed(0, "\xc2\x00", 2, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "reserved bits");
    ASSERT_EQ(feed(0, "\x81\x01x", 3, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "text frame");
    ASSERT_EQ(feed(0, "\x83\x00", 2, 0, &dec, &err), IB_E_IO);
    ASSERT_EQ(feed(0, "\x8b\x00", 2, 0, &dec, &err), IB_E_IO);
    ASSERT_EQ(feed(0, "\x89\x7e\x00\x7e", 4, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "longer than 125");
    ASSERT_EQ(feed(0, "\x09\x00", 2, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "fragmented control");
    ASSERT_EQ(feed(0, "\x80\x00", 2, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "continuation");
    ASSERT_EQ(feed(0, "\x02\x00\x82\x00", 4, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "before the fragmented one ended");
    ASSERT_EQ(feed(0, "\x88\x01\x03", 3, 0, &dec, &err), IB_E_IO);
    ASSERT_EQ(feed(0, "\x82\x7f\x80\x00\x00\x00\x00\x00\x00\x00", 10, 0, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "top bit");
    ASSERT_EQ(feed(0, "\x82\x7e\x01\x00", 4, 255, &dec, &err), IB_E_IO);
    ASSERT_CONTAINS(err.text, "256 bytes (limit 255)");
    ASSERT_EQ(sb_ws_dec_close_code(&dec), SB_WS_CLOSE_TOO_BIG);
    ASSERT_EQ(feed(0, "\x82\x7f\x00\x00\x00\x01\x00\x00\x00\x00", 10, 0, &dec, &err), IB_E_IO);
    ASSERT_EQ(sb_ws_dec_close_code(&dec), SB_WS_CLOSE_TOO_BIG);
    ASSERT_EQ(feed(0, "\x82\x03xyz\x8a\x00", 7, 0, &dec, &err), IB_E_OK);
}

int main(void)
{
    RUN(test_accept_rfc_example);
    RUN(test_handshake_round_trip);
    RUN(test_handshake_refusals);
    RUN(test_handshake_too_long);
    RUN(test_frames_every_length);
    RUN(test_fragments_and_ping);
    RUN(test_control_events);
    RUN(test_frame_refusals);
    return ib_test_done();
}
