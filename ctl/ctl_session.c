/*
 * ctl_session.c - `inboxctl session show|unpark` (see ctl_session.h).
 * thread: main.
 */
#include "ctl_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "ib_time.h"

/* The state as JSON when it is JSON, else as a string (binary shown as text). */
static json_t *state_json(const char *state, size_t len)
{
    json_t *j;
    if (!state)
        return json_null();
    j = json_loadb(state, len, JSON_DECODE_ANY, NULL);
    return j ? j : json_stringn_nocheck(state, len);
}

/* Reads (and for unpark of a parked session, clears) the state, retrying while it is locked. */
static ib_err_t call(sb_sender_t *s, const char *entity, const char *sid, bool unpark, char **st,
                     size_t *len, long wait_s, ib_error_t *err)
{
    long long deadline = ib_mono_ms() + wait_s * 1000;
    ib_err_t rc;
    for (;;) {
        rc = sb_sender_session_state(s, entity, sid, unpark, st, len, err);
        if (rc != IB_E_BROKER || !strstr(err->text, "session-cannot-be-locked") ||
            ib_mono_ms() >= deadline)
            return rc;
        /* inboxd holds a parked session for most of its lock duration, then leaves it free
         * for a moment: wait for that. */
        ib_sleep_ms(250, NULL);
    }
}

int ctl_session(sb_sender_t *s, const char *entity, const char *session_id, bool unpark,
                     long wait_s)
{
    char *st = NULL;
    size_t len = 0;
    ib_error_t err;
    json_t *out;
    int rc = 0;
    bool parked;
    /* Only inboxd's parked record is cleared, never an application's own state. */
    if (call(s, entity, session_id, unpark, &st, &len, wait_s, &err) != IB_E_OK) {
        fprintf(stderr, "inboxctl: session %s of %s: %s failed: %s\n", session_id, entity,
                unpark ? "unpark" : "reading its state", err.text);
        free(st);
        return 1;
    }
    parked = sb_session_state_parked(st, len);
    out = json_pack("{s:s, s:s, s:b, s:o}", "session_id", session_id, "entity", entity,
                    unpark ? "was_parked" : "parked", parked, "state", state_json(st, len));
    if (unpark && !parked) {
        json_object_set_new(out, "action", json_string("none: the session is not parked"));
        rc = 4;
    } else if (unpark) {
        json_object_set_new(out, "action",
                            json_string("unparked: parked record cleared, the session's "
                                        "messages flow again, in order"));
    }
    {
        char *text = json_dumps(out, JSON_COMPACT);
        if (text)
            printf("%s\n", text);
        free(text);
    }
    json_decref(out);
    free(st);
    return rc;
}
