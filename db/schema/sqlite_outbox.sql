-- inboxd outbox table for SQLite (db.dialect "sqlite"); name: outbox.table (here inboxd_outbox).
--
-- inboxd creates this itself when db.migrate is true and the outbox is on.
-- With db.migrate false run this once; inboxd then checks every column.
--
-- The contract for applications that publish through inboxd's relay:
-- insert a row in the same transaction as your business change, giving
-- entity (queue or topic), message_id (deterministic: Service Bus duplicate
-- detection and the next inbox key on it) and, as needed, session_id,
-- subject, correlation_id, content_type, properties (a JSON object of
-- application properties: strings, numbers, booleans) and body (UTF-8
-- text, sent as one data section). Leave id, created_at, status, attempts,
-- last_error and published_at to their defaults. The relay sends pending
-- rows in id order (one session's rows in order), marks them published or
-- failed (last_error holds the broker's condition), and deletes published
-- rows after outbox.retention_s. Timestamps are UTC. trace_context, when
-- set, holds the W3C traceparent of the span that wrote the row: the
-- relay's publish span becomes its child (else the row's traceparent
-- property is used). Tables from before it got it: inboxd adds it when
-- db.migrate is true; otherwise run
--   ALTER TABLE inboxd_outbox ADD trace_context TEXT

CREATE TABLE IF NOT EXISTS inboxd_outbox (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    entity         TEXT NOT NULL,
    message_id     TEXT NOT NULL,
    session_id     TEXT,
    subject        TEXT,
    correlation_id TEXT,
    content_type   TEXT,
    properties     TEXT,
    body           TEXT,
    created_at     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    status         TEXT NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'published', 'failed')),
    attempts       INTEGER NOT NULL DEFAULT 0,
    last_error     TEXT,
    published_at   TEXT,
    trace_context  TEXT
);
CREATE INDEX IF NOT EXISTS inboxd_outbox_pending ON inboxd_outbox (id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS inboxd_outbox_session ON inboxd_outbox (session_id, id) WHERE status = 'pending';
CREATE INDEX IF NOT EXISTS inboxd_outbox_failed ON inboxd_outbox (session_id, id) WHERE status = 'failed';
CREATE INDEX IF NOT EXISTS inboxd_outbox_published ON inboxd_outbox (published_at) WHERE status = 'published';
