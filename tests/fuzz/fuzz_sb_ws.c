/*
 * Fuzz target: the WebSocket codec (sb_ws.h). The first byte picks the
 * decoder's side (bit 0), a small frame limit (bit 1) and the chunk size
 * the rest is fed in (bits 2-7); the rest goes to the frame reader and, as
 * text, to both handshake checks.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sb_ws.h"

/* Feeds in[0..n) in chunks of step; aborts when an invariant breaks. */
static void frames(uint8_t *in, size_t n, int server, uint64_t limit, size_t step)
{
    sb_ws_dec_t dec;
    size_t pos = 0, data = 0;
    int closed = 0;

    sb_ws_dec_init(&dec, server, limit);
    while (pos < n) {
        size_t chunk = n - pos < step ? n - pos : step, off = 0, used;
        sb_ws_ev_t ev;
        ib_error_t err;
        do {
            if (sb_ws_dec_next(&dec, in + pos + off, chunk - off, &used, &ev, &err) != IB_E_OK) {
                if (!err.text[0])
                    abort();
                return;
            }
            if (used > chunk - off || (closed && (used || ev.kind != SB_WS_EV_NONE)))
                abort();
            off += used;
            if (ev.kind == SB_WS_EV_DATA && (ev.len == 0 || ev.len > dec.limit))
                abort();
            if (ev.kind == SB_WS_EV_PING && ev.len > SB_WS_CONTROL_MAX)
                abort();
            data += ev.kind == SB_WS_EV_DATA ? ev.len : 0;
            closed |= ev.kind == SB_WS_EV_CLOSE;
        } while (off < chunk || ev.kind != SB_WS_EV_NONE);
        pos += chunk;
    }
    if (data > n)
        abort();
}

static void handshakes(const uint8_t *in, size_t n)
{
    char key[25];
    size_t used = 0;
    int offered = 0;
    ib_error_t err;
    ib_err_t rc;

    rc = sb_ws_answer_check((const char *)in, n, "dGhlIHNhbXBsZSBub25jZQ==", SB_WS_PROTOCOL,
                            "proxy:3128", &used, &err);
    if ((rc == IB_E_OK && used > n) || (rc != IB_E_OK && rc != IB_E_AGAIN && !err.text[0]))
        abort();
    rc = sb_ws_request_check((const char *)in, n, SB_WS_PROTOCOL, key, &offered, &used, &err);
    if (rc == IB_E_OK && (used > n || strlen(key) != 24))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *in;

    if (size < 1)
        return 0;
    handshakes(data + 1, size - 1);
    in = malloc(size);
    if (!in)
        return 0;
    memcpy(in, data + 1, size - 1);
    frames(in, size - 1, data[0] & 1, (data[0] & 2) ? 200 : 0, (size_t)(data[0] >> 2) + 1);
    free(in);
    return 0;
}
