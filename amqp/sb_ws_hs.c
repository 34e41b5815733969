/*
 * sb_ws_hs.c - the RFC 6455 opening handshake (sb_ws.h): the client's GET
 * and the check of the server's 101, and the server's side of both for
 * sbemu. Keys and accepts are base64 and SHA-1 from OpenSSL.
 *
 * thread: any (pure functions over caller-owned buffers).
 */
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "sb_ws.h"

/* The GUID that RFC 6455 4.2.2 appends to a key before hashing. */
#define WS_GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

void sb_ws_key_make(char key[25], const uint8_t nonce[16])
{
    EVP_EncodeBlock((unsigned char *)key, nonce, 16);
}

void sb_ws_accept_make(char accept[29], const char *key)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    char in[128];
    int n = snprintf(in, sizeof(in), "%s%s", key, WS_GUID);

    if (n < 0 || (size_t)n >= sizeof(in))
        n = 0;
    EVP_Digest(in, (size_t)n, md, &mdlen, EVP_sha1(), NULL);
    EVP_EncodeBlock((unsigned char *)accept, md, (int)mdlen);
}

size_t sb_ws_request_format(char *buf, size_t size, const char *host, int port, const char *path,
                            const char *key, const char *protocol)
{
    char hostport[300];
    int n;

    if (port == 443)
        snprintf(hostport, sizeof(hostport), "%s", host);
    else
        snprintf(hostport, sizeof(hostport), "%s:%d", host, port);
    n = snprintf(buf, size,
                 "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                 "Sec-WebSocket-Protocol: %s\r\n\r\n",
                 path, hostport, key, protocol);
    return n < 0 ? 0 : (size_t)n;
}

size_t sb_ws_answer_format(char *buf, size_t size, const char *key, const char *protocol)
{
    char accept[29];
    int n;

    sb_ws_accept_make(accept, key);
    n = snprintf(buf, size,
                 "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Accept: %s\r\n%s%s%s\r\n",
                 accept, protocol ? "Sec-WebSocket-Protocol: " : "", protocol ? protocol : "",
                 protocol ? "\r\n" : "");
    return n < 0 ? 0 : (size_t)n;
}

ib_err_t sb_ws_status_error(int status, const char *who, const char *via, ib_error_t *err)
{
    if (status == 407)
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                            "proxy %s refused the tunnel: 407 Proxy Authentication Required "
                            "(give servicebus.proxy or HTTPS_PROXY a user:password it accepts)",
                            via && *via ? via : "(none configured)");
    if (status == 401 || status == 403)
        return ib_error_set(err, IB_E_AUTH, IB_CLASS_PERMANENT,
                            "WebSocket handshake refused by %s: %d %s", who, status,
                            status == 401 ? "Unauthorized" : "Forbidden");
    return ib_error_set(err, IB_E_IO, IB_CLASS_TRANSIENT,
                        "WebSocket handshake refused by %s: HTTP status %d", who, status);
}

/* The length of the header (up to and with its blank line), 0 while not whole. */
static size_t head_len(const char *buf, size_t len)
{
    for (size_t i = 3; i < len; i++)
        if (buf[i] == '\n' && buf[i - 1] == '\r' && buf[i - 2] == '\n' && buf[i - 3] == '\r')
            return i + 1;
    return 0;
}

/* A header field: name and value, the value without surrounding blanks. */
typedef struct hs_field {
    const char *name, *val;
    size_t nlen, vlen;
} hs_field_t;

/* The next line at *p (before end); 0 when no line is left. */
static int field_next(const char **p, const char *end, hs_field_t *f)
{
    const char *eol = memchr(*p, '\n', (size_t)(end - *p));
    const char *colon;

    if (!eol || eol - *p <= 1)
        return 0;
    colon = memchr(*p, ':', (size_t)(eol - *p));
    f->name = *p;
    f->nlen = colon ? (size_t)(colon - *p) : 0;
    f->val = colon ? colon + 1 : eol;
    while (f->val < eol && (*f->val == ' ' || *f->val == '\t'))
        f->val++;
    f->vlen = (size_t)(eol - f->val);
    while (f->vlen && isspace((unsigned char)f->val[f->vlen - 1]))
        f->vlen--;
    *p = eol + 1;
    return 1;
}

static int name_is(const hs_field_t *f, const char *name)
{
    return f->nlen == strlen(name) && strncasecmp(f->name, name, f->nlen) == 0;
}

static int val_is(const hs_field_t *f, const char *v)
{
    return f->vlen == strlen(v) && strncmp(f->val, v, f->vlen) == 0;
}

/* Whether the comma-separated value holds token (case-insensitive when ci). */
static int val_has(const hs_field_t *f, const char *token, int ci)
{
    const char *p = f->val, *end = f->val + f->vlen;
    size_t tl = strlen(token);

    while (p < end) {
        const char *c = memchr(p, ',', (size_t)(end - p));
        const char *e = c ? c : end;
        while (p < e && *p == ' ')
            p++;
        size_t l = (size_t)(e - p);
        while (l && p[l - 1] == ' ')
            l--;
        if (l == tl && (ci ? strncasecmp(p, token, l) : strncmp(p, token, l)) == 0)
            return 1;
        p = c ? c + 1 : end;
    }
    return 0;
}

/* The status of an HTTP/1.x status line, -1 when it is not one. */
static int status_parse(const char *buf, size_t len)
{
    int s = 0;

    if (len < 12 || strncmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ')
        return -1;
    for (int i = 9; i < 12; i++) {
        if (!isdigit((unsigned char)buf[i]))
            return -1;
        s = s * 10 + (buf[i] - '0');
    }
    return s;
}

/* The flags a 101 answer's fields set. */
enum { ANS_UPGRADE = 1, ANS_CONNECTION = 2, ANS_ACCEPT = 4, ANS_PROTOCOL = 8, ANS_EXT = 16 };

static int answer_fields(const char *p, const char *end, const char *accept, const char *protocol)
{
    hs_field_t f;
    int got = 0;

    while (field_next(&p, end, &f)) {
        if (name_is(&f, "Upgrade") && f.vlen == 9 && strncasecmp(f.val, "websocket", 9) == 0)
            got |= ANS_UPGRADE;
        else if (name_is(&f, "Connection") && val_has(&f, "upgrade", 1))
            got |= ANS_CONNECTION;
        else if (name_is(&f, "Sec-WebSocket-Accept") && val_is(&f, accept))
            got |= ANS_ACCEPT;
        else if (name_is(&f, "Sec-WebSocket-Protocol") && val_is(&f, protocol))
            got |= ANS_PROTOCOL;
        else if (name_is(&f, "Sec-WebSocket-Extensions"))
            got |= ANS_EXT;
    }
    return got;
}

static ib_err_t bad_answer(ib_error_t *err, const char *what)
{
    return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT, "WebSocket handshake: %s", what);
}

ib_err_t sb_ws_answer_check(const char *buf, size_t len, const char *key, const char *protocol,
                            const char *via, size_t *used, ib_error_t *err)
{
    size_t hl = head_len(buf, len < SB_WS_HEAD_MAX ? len : SB_WS_HEAD_MAX);
    char accept[29];
    int status, got;

    if (!hl)
        return len >= SB_WS_HEAD_MAX ? bad_answer(err, "the answer's header is longer than 8192 "
                                                       "bytes")
                                     : IB_E_AGAIN;
    status = status_parse(buf, hl);
    if (status < 0)
        return bad_answer(err, "the answer is not HTTP/1.1");
    if (status != 101)
        return sb_ws_status_error(status, "the server", via, err);
    sb_ws_accept_make(accept, key);
    got = answer_fields(buf, buf + hl, accept, protocol);
    if (!(got & ANS_UPGRADE) || !(got & ANS_CONNECTION))
        return bad_answer(err, "the 101 answer lacks Upgrade: websocket or Connection: Upgrade");
    if (!(got & ANS_ACCEPT))
        return bad_answer(err, "Sec-WebSocket-Accept does not match the key sent");
    if (!(got & ANS_PROTOCOL))
        return ib_error_set(err, IB_E_IO, IB_CLASS_PERMANENT,
                            "WebSocket handshake: the server did not agree to subprotocol %s",
                            protocol);
    if (got & ANS_EXT)
        return bad_answer(err, "the server chose an extension none was offered");
    *used = hl;
    return IB_E_OK;
}

/* Whether a key is 24 characters of base64 (16 bytes encoded). */
static int key_ok(const hs_field_t *f)
{
    if (f->vlen != 24)
        return 0;
    for (size_t i = 0; i < 24; i++)
        if (!isalnum((unsigned char)f->val[i]) && !memchr("+/=", f->val[i], 3))
            return 0;
    return f->val[22] == '=' && f->val[23] == '=';
}

/* The flags a client's GET sets. */
enum { REQ_UPGRADE = 1, REQ_CONNECTION = 2, REQ_VERSION = 4, REQ_KEY = 8, REQ_PROTOCOL = 16 };

static int request_fields(const char *p, const char *end, const char *protocol, char key[25])
{
    hs_field_t f;
    int got = 0;

    while (field_next(&p, end, &f)) {
        if (name_is(&f, "Upgrade") && val_has(&f, "websocket", 1))
            got |= REQ_UPGRADE;
        else if (name_is(&f, "Connection") && val_has(&f, "upgrade", 1))
            got |= REQ_CONNECTION;
        else if (name_is(&f, "Sec-WebSocket-Version") && val_is(&f, "13"))
            got |= REQ_VERSION;
        else if (name_is(&f, "Sec-WebSocket-Key") && key_ok(&f)) {
            memcpy(key, f.val, 24);
            key[24] = '\0';
            got |= REQ_KEY;
        } else if (name_is(&f, "Sec-WebSocket-Protocol") && protocol && val_has(&f, protocol, 0))
            got |= REQ_PROTOCOL;
    }
    return got;
}

ib_err_t sb_ws_request_check(const char *buf, size_t len, const char *protocol, char key[25],
                             int *offered, size_t *used, ib_error_t *err)
{
    size_t hl = head_len(buf, len < SB_WS_HEAD_MAX ? len : SB_WS_HEAD_MAX);
    const char *eol;
    int got;

    if (!hl)
        return len >= SB_WS_HEAD_MAX ? bad_answer(err, "the request's header is longer than "
                                                       "8192 bytes")
                                     : IB_E_AGAIN;
    eol = memchr(buf, '\n', hl);
    if (hl < 14 || strncmp(buf, "GET ", 4) != 0 || !eol || eol - buf < 10 ||
        strncmp(eol - 9, "HTTP/1.1\r", 9) != 0)
        return bad_answer(err, "the request is not an HTTP/1.1 GET");
    got = request_fields(eol + 1, buf + hl, protocol, key);
    if ((got & (REQ_UPGRADE | REQ_CONNECTION | REQ_VERSION | REQ_KEY)) !=
        (REQ_UPGRADE | REQ_CONNECTION | REQ_VERSION | REQ_KEY))
        return bad_answer(err, "the request lacks Upgrade, Connection, version 13 or a key");
    *offered = (got & REQ_PROTOCOL) != 0;
    *used = hl;
    return IB_E_OK;
}
