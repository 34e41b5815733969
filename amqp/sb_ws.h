/*
 * sb_ws.h - the RFC 6455 (WebSocket) codec that carries AMQP 1.0 to Service
 * Bus on port 443: the opening handshake and the framing, no sockets.
 *
 *   handshake  sb_ws_request_format writes the client's GET with a key and
 *              the subprotocol (AMQPWSB10 for Service Bus); sb_ws_answer_check
 *              reads the server's answer: 101, Upgrade, Connection,
 *              Sec-WebSocket-Accept computed from the key, the subprotocol
 *              echoed, no extension. A refusal names its status (401, 407
 *              with the proxy, ...). The server's side (sbemu) uses
 *              sb_ws_request_check and sb_ws_answer_format.
 *   frames     sb_ws_head_encode writes a frame's header (the mask key when
 *              the client sends), sb_ws_mask masks or unmasks in place, so a
 *              payload is read once into its buffer and never copied again.
 *              sb_ws_dec_next reads frames from whatever chunks arrive:
 *              binary data (fragments too) comes out as slices of the input,
 *              ping, pong and close as events; a masked frame from a server
 *              (or an unmasked one from a client), a reserved bit, an unknown
 *              or text opcode, a fragmented or long control frame, a frame
 *              past the caller's limit, or anything after close is refused.
 *
 * thread: any. Pure functions over caller-owned buffers and a caller-owned
 * decoder; no allocation.
 */
#ifndef SB_WS_H
#define SB_WS_H

#include <stddef.h>
#include <stdint.h>

#include "ib_err.h"

/* The subprotocol Service Bus speaks AMQP 1.0 in, and its path. */
#define SB_WS_PROTOCOL "AMQPWSB10"
#define SB_WS_PATH "/$servicebus/websocket/"
/* A handshake answer or request longer than this is refused. */
#define SB_WS_HEAD_MAX 8192
/* The longest header of a frame: 2 + 8 (length) + 4 (mask). */
#define SB_WS_FRAME_HEAD_MAX 14
/* A control frame's payload is never longer (RFC 6455 5.5). */
#define SB_WS_CONTROL_MAX 125
/* The default limit on one frame's payload: four times a 1 MB message. */
#define SB_WS_FRAME_LIMIT (4u << 20)

enum {
    SB_WS_OP_CONT = 0x0,
    SB_WS_OP_TEXT = 0x1,
    SB_WS_OP_BINARY = 0x2,
    SB_WS_OP_CLOSE = 0x8,
    SB_WS_OP_PING = 0x9,
    SB_WS_OP_PONG = 0xA,
};

/* Close codes this code sends or reads (RFC 6455 7.4.1). */
enum {
    SB_WS_CLOSE_NORMAL = 1000,
    SB_WS_CLOSE_PROTOCOL = 1002,
    SB_WS_CLOSE_TOO_BIG = 1009,
};

/* ---- handshake ---- */

/* The 24-character base64 key of 16 random bytes into key (25 bytes). */
void sb_ws_key_make(char key[25], const uint8_t nonce[16]);

/* The Sec-WebSocket-Accept value of key into accept (29 bytes). */
void sb_ws_accept_make(char accept[29], const char *key);

/*
 * Writes the client's opening request for host (with ":port" when port is
 * not 443), path, key and protocol into buf (snprintf's contract). Returns
 * the length of the whole request.
 */
size_t sb_ws_request_format(char *buf, size_t size, const char *host, int port, const char *path,
                            const char *key, const char *protocol);

/*
 * Checks the server's answer in buf[0..len). IB_E_AGAIN: the header is not
 * whole yet (read more). IB_E_OK: *used gets the header's length (bytes
 * after it are already frames). Anything else is a refusal with err's text
 * naming who refused: via, when not NULL, is the proxy (host:port, no
 * secret) that a 407 names.
 */
ib_err_t sb_ws_answer_check(const char *buf, size_t len, const char *key, const char *protocol,
                            const char *via, size_t *used, ib_error_t *err);

/*
 * The server's side: checks a client's GET in buf[0..len) (IB_E_AGAIN while
 * not whole), copies its key into key (25 bytes) and reports whether it
 * offered protocol. *used gets the request's length.
 */
ib_err_t sb_ws_request_check(const char *buf, size_t len, const char *protocol, char key[25],
                             int *offered, size_t *used, ib_error_t *err);

/* The server's 101 answer for key (echoing protocol when not NULL). */
size_t sb_ws_answer_format(char *buf, size_t size, const char *key, const char *protocol);

/*
 * An error's text for a refusing HTTP status: 401/403 (IB_E_AUTH,
 * permanent), 407 naming via (IB_E_AUTH, permanent), anything else
 * (IB_E_IO, transient). Returns the code.
 */
ib_err_t sb_ws_status_error(int status, const char *who, const char *via, ib_error_t *err);

/* ---- frames ---- */

/*
 * Writes the header of a final frame of opcode with a payload of len bytes
 * into head; mask (4 bytes) when not NULL is written too and sets the mask
 * bit. Returns the header's length (2 to 14).
 */
size_t sb_ws_head_encode(uint8_t head[SB_WS_FRAME_HEAD_MAX], int opcode, uint64_t len,
                         const uint8_t *mask);

/* XORs n bytes at p with mask, starting at payload offset off (mod 4). */
void sb_ws_mask(uint8_t *p, size_t n, const uint8_t mask[4], uint64_t off);

/*
 * A whole control frame (ping, pong, close) with payload p[0..n), n <= 125,
 * into out; masked when mask is not NULL. Returns its length.
 */
size_t sb_ws_control_encode(uint8_t out[SB_WS_FRAME_HEAD_MAX + SB_WS_CONTROL_MAX], int opcode,
                            const uint8_t *p, size_t n, const uint8_t *mask);

/* What sb_ws_dec_next found. */
typedef enum {
    SB_WS_EV_NONE = 0, /* the input is used up; feed more */
    SB_WS_EV_DATA,     /* data bytes of a binary message (data, len) */
    SB_WS_EV_PING,     /* answer with a pong of the same payload */
    SB_WS_EV_PONG,
    SB_WS_EV_CLOSE, /* the peer closes: close_code (0 when none), then nothing more */
} sb_ws_ev_kind_t;

typedef struct sb_ws_ev {
    sb_ws_ev_kind_t kind;
    const uint8_t *data; /* into the input (DATA) or the decoder (control) */
    size_t len;
    int close_code;
} sb_ws_ev_t;

/* A frame reader's state; zero it with sb_ws_dec_init. */
typedef struct sb_ws_dec {
    int server;     /* 1: frames come from a client and must be masked */
    uint64_t limit; /* the longest payload accepted in one frame */
    uint8_t head[SB_WS_FRAME_HEAD_MAX];
    size_t head_have; /* header bytes gathered so far */
    int in_frame;     /* a header was read; left payload bytes follow */
    int opcode;       /* the frame's opcode */
    int fin;
    int fragmented; /* a data message continues in the next frame */
    int closed;     /* a close was read: nothing may follow */
    int too_big;    /* the last refusal was a frame past limit */
    uint64_t left;  /* payload bytes of this frame still to come */
    uint64_t off;   /* payload bytes of this frame already read */
    uint8_t mask[4];
    int masked;
    uint8_t ctl[SB_WS_CONTROL_MAX];
    size_t ctl_have;
} sb_ws_dec_t;

/* Resets dec for frames from a server (server 0) or a client (server 1). */
void sb_ws_dec_init(sb_ws_dec_t *dec, int server, uint64_t limit);

/*
 * Reads from in[0..n) (masked payload is unmasked in place, hence not
 * const). Sets *used to the bytes consumed and ev to what was found; call
 * again with the rest while *used < n or ev->kind is not SB_WS_EV_NONE.
 * Returns IB_E_OK or IB_E_IO (permanent) with err's text saying what the
 * peer did wrong; the caller then closes with SB_WS_CLOSE_PROTOCOL (or
 * SB_WS_CLOSE_TOO_BIG for a frame past the limit, sb_ws_dec_close_code).
 */
ib_err_t sb_ws_dec_next(sb_ws_dec_t *dec, uint8_t *in, size_t n, size_t *used, sb_ws_ev_t *ev,
                        ib_error_t *err);

/* The close code to answer a refused frame with (after sb_ws_dec_next failed). */
int sb_ws_dec_close_code(const sb_ws_dec_t *dec);

#endif
