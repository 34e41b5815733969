/*
 * sb_ws.c - RFC 6455 frames: the header encoder, masking, control frames
 * and the incremental frame reader (sb_ws.h). The handshake is in
 * sb_ws_hs.c.
 *
 * The reader never buffers data: a binary payload comes out as slices of
 * the caller's input, unmasked in place, so a large AMQP transfer is copied
 * only by whoever reads the socket. Control payloads (125 bytes at most) are
 * gathered in the decoder because they may straddle two reads.
 *
 * thread: any (the caller owns the decoder).
 */
#include <string.h>

#include "sb_ws.h"

size_t sb_ws_head_encode(uint8_t head[SB_WS_FRAME_HEAD_MAX], int opcode, uint64_t len,
                         const uint8_t *mask)
{
    size_t i = 2;

    head[0] = (uint8_t)(0x80 | (opcode & 0x0f));
    if (len < 126) {
        head[1] = (uint8_t)len;
    } else if (len <= 0xffff) {
        head[1] = 126;
        head[2] = (uint8_t)(len >> 8);
        head[3] = (uint8_t)len;
        i = 4;
    } else {
        head[1] = 127;
        for (int b = 0; b < 8; b++)
            head[2 + b] = (uint8_t)(len >> (56 - 8 * b));
        i = 10;
    }
    if (mask) {
        head[1] |= 0x80;
        memcpy(head + i, mask, 4);
        i += 4;
    }
    return i;
}

void sb_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t off)
{
    size_t k = (size_t)(off & 3);

    for (size_t i = 0; i < n; i++, k = (k + 1) & 3)
        p[i] ^= mask[k];
}

size_t sb_ws_control_encode(uint8_t out[SB_WS_FRAME_HEAD_MAX + SB_WS_CONTROL_MAX], int opcode,
                            const uint8_t *p, size_t n, const uint8_t *mask)
{
    size_t h;

    if (n > SB_WS_CONTROL_MAX)
        n = SB_WS_CONTROL_MAX;
    h = sb_ws_head_encode(out, opcode, n, mask);
    if (n)
        memcpy(out + h, p, n);
    if (mask)
        sb_ws_mask(out + h, n, mask, 0);
    return h + n;
}

void sb_ws_dec_init(sb_ws_dec_t *dec, int server, uint64_t limit)
{
    memset(dec, 0, sizeof(*dec));
    dec->server = server;
    dec->limit = limit ? limit : SB_WS_FRAME_LIMIT;
}

int sb_ws_dec_close_code(const sb_ws_dec_t *dec)
{
    return dec->too_big ? SB_WS_CLOSE_TOO_BIG : SB_WS_CLOSE_PROTOCOL;
}

/* How many header bytes the frame whose first have bytes are in h needs. */
static size_t head_need(const uint8_t *h, size_t have)
{
    size_t need = 2;

    if (have < 2)
        return 2;
    if ((h[1] & 0x7f) == 126)
        need += 2;
    else if ((h[1] & 0x7f) == 127)
        need += 8;
    if (h[1] & 0x80)
        need += 4;
    return need;
}

static ib_err_t refuse(ib_error_t *err, const char *what)
{
    return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "WebSocket: refused %s", what);
}

/* Checks the opcode against the message in progress; updates fragmented. */
static ib_err_t opcode_check(sb_ws_dec_t *dec, uint64_t len, ib_error_t *err)
{
    int op = dec->opcode;

    if (op & 0x8) {
        if (op != SB_WS_OP_CLOSE && op != SB_WS_OP_PING && op != SB_WS_OP_PONG)
            return refuse(err, "a frame with a reserved control opcode");
        if (!dec->fin)
            return refuse(err, "a fragmented control frame");
        if (len > SB_WS_CONTROL_MAX)
            return refuse(err, "a control frame longer than 125 bytes");
        return IB_E_OK;
    }
    if (op == SB_WS_OP_TEXT)
        return refuse(err, "a text frame (AMQP travels in binary frames)");
    if (op == SB_WS_OP_BINARY && dec->fragmented)
        return refuse(err, "a new message before the fragmented one ended");
    if (op == SB_WS_OP_CONT && !dec->fragmented)
        return refuse(err, "a continuation frame outside a fragmented message");
    if (op != SB_WS_OP_BINARY && op != SB_WS_OP_CONT)
        return refuse(err, "a frame with a reserved data opcode");
    dec->fragmented = !dec->fin;
    return IB_E_OK;
}

/* Reads the whole header in dec->head; starts the frame. */
static ib_err_t head_parse(sb_ws_dec_t *dec, ib_error_t *err)
{
    const uint8_t *h = dec->head;
    uint64_t len = h[1] & 0x7f;
    size_t i = 2;

    if (h[0] & 0x70)
        return refuse(err, "a frame with reserved bits set (no extension was agreed)");
    dec->fin = h[0] >> 7;
    dec->opcode = h[0] & 0x0f;
    dec->masked = h[1] >> 7;
    if (dec->masked != dec->server)
        return refuse(err, dec->server ? "an unmasked frame from the client"
                                       : "a masked frame from the server");
    if (len == 126) {
        len = (uint64_t)h[2] << 8 | h[3];
        i = 4;
    } else if (len == 127) {
        len = 0;
        for (int b = 0; b < 8; b++)
            len = len << 8 | h[2 + b];
        i = 10;
        if (len >> 63)
            return refuse(err, "a frame length with its top bit set");
    }
    if (dec->masked)
        memcpy(dec->mask, h + i, 4);
    if (opcode_check(dec, len, err) != IB_E_OK)
        return err->code;
    if (len > dec->limit) {
        dec->too_big = 1;
        return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT,
                            "WebSocket: refused a frame of %llu bytes (limit %llu)",
                            (unsigned long long)len, (unsigned long long)dec->limit);
    }
    dec->in_frame = 1;
    dec->left = len;
    dec->off = 0;
    dec->ctl_have = 0;
    return IB_E_OK;
}

/* Gathers header bytes from in[*pos..n); 1 when the header is whole. */
static int head_gather(sb_ws_dec_t *dec, const uint8_t *in, size_t n, size_t *pos)
{
    size_t need;

    while ((need = head_need(dec->head, dec->head_have)) > dec->head_have) {
        if (*pos == n)
            return 0;
        dec->head[dec->head_have++] = in[(*pos)++];
    }
    dec->head_have = 0;
    return 1;
}

/* The event of a whole control frame in dec->ctl. */
static ib_err_t control_done(sb_ws_dec_t *dec, sb_ws_ev_t *ev, ib_error_t *err)
{
    ev->data = dec->ctl;
    ev->len = dec->ctl_have;
    if (dec->opcode == SB_WS_OP_PING) {
        ev->kind = SB_WS_EV_PING;
    } else if (dec->opcode == SB_WS_OP_PONG) {
        ev->kind = SB_WS_EV_PONG;
    } else {
        if (dec->ctl_have == 1)
            return refuse(err, "a close frame of one byte");
        ev->kind = SB_WS_EV_CLOSE;
        ev->close_code = dec->ctl_have >= 2 ? (dec->ctl[0] << 8 | dec->ctl[1]) : 0;
        dec->closed = 1;
    }
    return IB_E_OK;
}

/* Takes payload bytes of the current frame from in[*pos..n). */
static ib_err_t payload_take(sb_ws_dec_t *dec, uint8_t *in, size_t n, size_t *pos, sb_ws_ev_t *ev,
                             ib_error_t *err)
{
    size_t k = n - *pos;

    if (k > dec->left)
        k = (size_t)dec->left;
    if (dec->masked)
        sb_ws_mask(in + *pos, k, dec->mask, dec->off);
    if (dec->opcode & 0x8) {
        memcpy(dec->ctl + dec->ctl_have, in + *pos, k);
        dec->ctl_have += k;
    } else if (k) {
        ev->kind = SB_WS_EV_DATA;
        ev->data = in + *pos;
        ev->len = k;
    }
    *pos += k;
    dec->left -= k;
    dec->off += k;
    if (dec->left)
        return IB_E_OK;
    dec->in_frame = 0;
    return (dec->opcode & 0x8) ? control_done(dec, ev, err) : IB_E_OK;
}

ib_err_t sb_ws_dec_next(sb_ws_dec_t *dec, uint8_t *in, size_t n, size_t *used, sb_ws_ev_t *ev,
                        ib_error_t *err)
{
    size_t pos = 0;

    memset(ev, 0, sizeof(*ev));
    *used = 0;
    if (dec->closed && n)
        return refuse(err, "bytes after the close frame");
    while (ev->kind == SB_WS_EV_NONE) {
        if (!dec->in_frame) {
            if (!head_gather(dec, in, n, &pos))
                break;
            if (head_parse(dec, err) != IB_E_OK)
                return err->code;
        }
        if (payload_take(dec, in, n, &pos, ev, err) != IB_E_OK)
            return err->code;
        if (pos == n && dec->in_frame)
            break;
    }
    *used = pos;
    return IB_E_OK;
}
