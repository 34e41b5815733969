/*
 * db_limits.h - the widths of inboxd's text columns, each named once. The
 * dialects' column types (db_traits_t in db_dialect.c) are built from
 * these, and tests/unit/test_db_dialect.c and test_db_outbox_sql.c hold
 * the DDL rendered from them against the files of db/schema/, so a width changed
 * here and not in a schema file (or the other way round) fails there.
 * Whoever checks a value before it reaches a column (the claim, the
 * pipeline, a route's emits) reads the limit from here.
 *
 * Widths are in bytes of UTF-8 as inboxd checks them; SQL Server's
 * nvarchar counts UTF-16 units, of which a byte of UTF-8 never needs more
 * than one.
 *
 * thread: any (constants).
 */
#ifndef DB_LIMITS_H
#define DB_LIMITS_H

/* inbox.message_id; outbox message_id, session_id, correlation_id, trace_context. */
#define DB_MESSAGE_ID_MAX 128
/* inbox.consumer. */
#define DB_CONSUMER_MAX 200
/* inbox.entity; outbox entity, subject, content_type (a queue or topic path). */
#define DB_ENTITY_MAX 260
/* inbox idempotency_key, remote_id. */
#define DB_IDEM_KEY_MAX 400
/* inbox error_detail, resolution_note; outbox last_error. */
#define DB_DETAIL_MAX 2000

/* A limit as the text of its number, for a column type or a message ("128"). */
#define DB_WIDTH(n) DB_WIDTH_(n)
#define DB_WIDTH_(n) #n

#endif
