/*
 * rt_emit.h - a route's "emit" list (see rt_route.h for the syntax): the
 * messages a route publishes through the outbox. Compiled once at start;
 * bound per message into the parameters of the outbox insert
 * (db_outbox_sql_insert: entity, message_id, session_id, subject,
 * correlation_id, content_type, properties, body). thread: any.
 */
#ifndef RT_EMIT_H
#define RT_EMIT_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "db_inbox.h"
#include "ib_err.h"
#include "ib_problems.h"
#include "sb_msg.h"
#include "rt_route.h"

#define RT_EMIT_PARAMS 9 /* the columns db_outbox_sql_insert binds */

typedef struct rt_emits rt_emits_t;

/*
 * Compiles an "emit" array, or with failure an "emit_on_failure" one (its
 * sources may also be reason, error_class and error, read from the
 * binding's failure; its body defaults to a JSON description of the
 * failure). Problems are reported through p (under the route's prefix) as
 * "emit[I].FIELD: WHY" (or "emit_on_failure[I]..."). NULL when it is not
 * an array. Sets *needs_json when a source reads the body as JSON.
 */
rt_emits_t *rt_emits_compile(const json_t *emit, bool failure, bool *needs_json, ib_problems_t *p);
void rt_emits_free(rt_emits_t *emits);
size_t rt_emits_count(const rt_emits_t *emits);
/* Binds emit i over msg into out[RT_EMIT_PARAMS]; strings are kept by b. */
ib_err_t rt_emits_bind(const rt_emits_t *emits, size_t i, const sb_msg_t *msg, rt_binding_t *b,
                       db_param_t *out, ib_error_t *err);

#endif
