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
