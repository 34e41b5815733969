/*
 * sb_peek.c - reading a com.microsoft:peek-message answer, and the step of
 * a peek walk from one page to the next (internal/sb_peek.h). An entry
 * that cannot be decoded is never dropped silently: it is counted, and the
 * walk pages past it by the sequence numbers of the entries around it.
 *
 * thread: any.
 */
#include "sb_peek.h"

#include <stdlib.h>
#include <string.h>

#include "sb_core.h"

void sb_peek_page_clear(sb_peek_page_t *pg)
{
    for (size_t k = 0; k < pg->n; k++)
        sb_msg_free(pg->msgs[k]);
    free(pg->msgs);
    memset(pg, 0, sizeof(*pg));
}

/* The "message" binary of the map entry at body's cursor; size 0 when there is none. */
static pn_bytes_t entry_message(pn_data_t *body)
{
    pn_bytes_t b = {0, NULL};
    if (pn_data_type(body) != PN_MAP)
        return b;
    pn_data_enter(body);
    while (pn_data_next(body)) {
        bool is_msg = pn_data_type(body) == PN_STRING && pn_data_get_string(body).size == 7 &&
                      memcmp(pn_data_get_string(body).start, "message", 7) == 0;
        if (!pn_data_next(body))
            break;
        if (is_msg && pn_data_type(body) == PN_BINARY)
            b = pn_data_get_binary(body);
    }
    pn_data_exit(body);
    return b;
}

/* Reads one entry into pg: a readable message, or one more unreadable entry. */
static ib_err_t read_entry(pn_data_t *body, sb_peek_page_t *pg, ib_error_t *err)
{
    pn_bytes_t b = entry_message(body);
    sb_msg_t *msg = NULL;
    pg->entries++;
    if (b.start) {
        msg = sb_msg_new_decoded((const unsigned char *)b.start, b.size, false);
        if (!msg)
            return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    }
    if (!msg || msg->sequence_number < 0) {
        sb_msg_free(msg);
        pg->tail++;
        return IB_E_OK;
    }
    pg->lead += pg->tail;
    pg->tail = 0;
    pg->msgs[pg->n++] = msg;
    return IB_E_OK;
}

ib_err_t sb_peek_page_read(pn_data_t *body, sb_peek_page_t *pg, ib_error_t *err)
{
    size_t cnt;
    memset(pg, 0, sizeof(*pg));
    ib_error_clear(err);
    if (!sb_body_find(body, "messages") || pn_data_type(body) != PN_LIST)
        return IB_E_OK;
    cnt = pn_data_get_list(body);
    pg->msgs = calloc(cnt ? cnt : 1, sizeof(sb_msg_t *));
    if (!pg->msgs)
        return ib_error_set(err, IB_E_NOMEM, IB_CLASS_TRANSIENT, "out of memory");
    pn_data_enter(body);
    while (pg->entries < cnt && pn_data_next(body)) {
        if (read_entry(body, pg, err) != IB_E_OK) {
            sb_peek_page_clear(pg);
            break;
        }
    }
    pn_data_exit(body);
    return err->code;
}

sb_peek_step_t sb_peek_walk_step(sb_peek_walk_t *w, const sb_peek_page_t *pg, long long top_seq)
{
    if (pg->n > 0) {
        w->unreadable += (long long)pg->lead;
        w->count = w->page;
        w->again = 0;
        if (top_seq < w->from)
            return SB_PEEK_STUCK;
        w->from = top_seq + 1;
        return SB_PEEK_MORE;
    }
    if (pg->entries == 0)
        return SB_PEEK_END;
    if (pg->entries != w->again && w->count < SB_PEEK_COUNT_MAX) {
        w->again = pg->entries;
        w->count = w->count > SB_PEEK_COUNT_MAX / 2 ? SB_PEEK_COUNT_MAX : w->count * 2;
        return SB_PEEK_MORE;
    }
    w->unreadable += (long long)pg->tail;
    return pg->entries < (size_t)w->count || pg->entries == w->again ? SB_PEEK_END : SB_PEEK_STUCK;
}

/* ---- cutting an answer short (sb_peek_answer_cut) -------------------------------- */

/* Deeper nesting is not followed: such a value fits only whole. */
#define CUT_DEPTH_MAX 32

static size_t be(const unsigned char *p, size_t width)
{
    size_t v = 0;
    for (size_t k = 0; k < width; k++)
        v = v << 8 | p[k];
    return v;
}

static void put_be(unsigned char *p, size_t width, size_t v)
{
    for (size_t k = width; k-- > 0; v >>= 8)
        p[k] = (unsigned char)v;
}

/*
 * The bytes of the constructor at p in front of a value's content: a fixed
 * width (*fixed), or the width of a size field (*size_w) the content's size
 * follows in. False for a code AMQP does not define.
 */
static bool layout(unsigned char code, size_t *fixed, size_t *size_w)
{
    static const size_t fixed_of[] = {0, 0, 0, 0, 0, 1, 2, 4, 8, 16};
    unsigned hi = code >> 4;
    *fixed = 0;
    *size_w = 0;
    if (hi >= 4 && hi <= 9)
        *fixed = fixed_of[hi];
    else if (hi == 0xa || hi == 0xc || hi == 0xe)
        *size_w = 1;
    else if (hi == 0xb || hi == 0xd || hi == 0xf)
        *size_w = 4;
    else
        return false;
    return true;
}

/* The end of the whole value at p, or NULL when it does not fit before end. */
static unsigned char *whole(unsigned char *p, unsigned char *end, int depth)
{
    size_t fixed, size_w, n;
    if (p >= end || depth > CUT_DEPTH_MAX)
        return NULL;
    if (*p == 0x00) { /* described: the descriptor, then the value */
        unsigned char *q = whole(p + 1, end, depth + 1);
        return q ? whole(q, end, depth + 1) : NULL;
    }
    if (!layout(*p, &fixed, &size_w))
        return NULL;
    if ((size_t)(end - p) < 1 + fixed + size_w)
        return NULL;
    n = size_w ? be(p + 1, size_w) : fixed;
    if ((size_t)(end - p) - 1 - size_w < n)
        return NULL;
    return p + 1 + size_w + n;
}

static unsigned char *fit(unsigned char *p, unsigned char *end, int depth);
static size_t cut_sections(unsigned char *buf, size_t len, int depth);

/*
 * The binary at p (vbin8 or vbin32) cut at end: it keeps the bytes there
 * are, read as an encoded message and cut to its sections when as_message
 * (a body's bytes are only shortened). Returns its new end, or NULL.
 */
static unsigned char *fit_binary(unsigned char *p, unsigned char *end, bool as_message, int depth)
{
    size_t w = *p == 0xa0 ? 1 : 4, have;
    if ((size_t)(end - p) < 1 + w)
        return NULL;
    have = (size_t)(end - p) - 1 - w;
    if (as_message)
        have = cut_sections(p + 1 + w, have, depth + 1);
    put_be(p + 1, w, have);
    return p + 1 + w + have;
}

static unsigned char *fit_compound(unsigned char *p, unsigned char *end, size_t w, int depth)
{
    unsigned char *q = p + 1 + 2 * w, *e;
    size_t count, kept = 0, step = (*p & 0x0f) == 1 ? 2 : 1;
    if ((size_t)(end - p) < 1 + 2 * w)
        return NULL;
    count = be(p + 1 + w, w);
    while (kept + step <= count) {
        unsigned char *k = step == 2 ? whole(q, end, depth + 1) : q;
        e = k ? whole(k, end, depth + 1) : NULL;
        if (!e) {
            e = k ? fit(k, end, depth + 1) : NULL;
            if (e) {
                q = e;
                kept += step;
            }
            break;
        }
        q = e;
        kept += step;
    }
    put_be(p + 1, w, (size_t)(q - (p + 1 + w)));
    put_be(p + 1 + w, w, kept);
    return q;
}

/*
 * The value at p, whose encoding runs past end, made to end before it: a
 * binary keeps what is there (see fit_binary: every binary but a data
 * section's is read as a message), a list or map its first elements;
 * anything else fits only whole. Returns the value's new end, or NULL when
 * nothing of it fits.
 */
static unsigned char *fit(unsigned char *p, unsigned char *end, int depth)
{
    size_t fixed, size_w;
    if (p >= end || depth > CUT_DEPTH_MAX)
        return NULL;
    if (*p == 0x00) {
        unsigned char *q = whole(p + 1, end, depth + 1);
        bool data = q == p + 3 && p[1] == 0x53 && p[2] == 0x75; /* amqp:data:binary */
        if (!q || q >= end)
            return NULL;
        if (data && (*q == 0xa0 || *q == 0xb0))
            return fit_binary(q, end, false, depth);
        return fit(q, end, depth + 1);
    }
    if (!layout(*p, &fixed, &size_w))
        return NULL;
    if (*p == 0xa0 || *p == 0xb0)
        return fit_binary(p, end, true, depth);
    if ((*p & 0xf0) == 0xc0 || (*p & 0xf0) == 0xd0)
        return fit_compound(p, end, size_w, depth);
    return NULL;
}

/* The encoded sections in buf cut at buf + len: sb_peek_answer_cut at a depth. */
static size_t cut_sections(unsigned char *buf, size_t len, int depth)
{
    unsigned char *p = buf, *end = buf + len, *q;
    while (p < end) {
        if ((q = whole(p, end, depth)) == NULL) {
            q = *p == 0x00 ? fit(p, end, depth) : NULL;
            return (size_t)((q ? q : p) - buf);
        }
        p = q;
    }
    return len;
}

size_t sb_peek_answer_cut(unsigned char *buf, size_t len)
{
    return cut_sections(buf, len, 0);
}
