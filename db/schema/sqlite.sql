-- inboxd inbox table for SQLite (db.dialect "sqlite"), through the SQLite3
-- ODBC driver: Driver={SQLite3};Database=/path/inbox.db;Timeout=10000
--
-- inboxd creates this itself when db.migrate is true; the database's write
-- lock serialises concurrent creators. With db.migrate false run this once.
--
-- Timestamps are UTC text 'YYYY-MM-DD HH:MM:SS.SSS'. body_sha256 is the
-- lowercase hex SHA-256 of the message body.
-- status: processed | failed | uncertain.

CREATE TABLE IF NOT EXISTS inbox (
    consumer        TEXT NOT NULL,
    message_id      TEXT NOT NULL,
    idempotency_key TEXT,
    body_sha256     TEXT NOT NULL,
    status          TEXT NOT NULL,
    entity          TEXT,
    sequence_number INTEGER,
    delivery_count  INTEGER,
    enqueued_at     TEXT,
    received_at     TEXT NOT NULL,
    processed_at    TEXT NOT NULL,
    error_class     TEXT,
    error_detail    TEXT,
    CONSTRAINT inbox_pk PRIMARY KEY (consumer, message_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS inbox_idem ON inbox (consumer, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbox_processed ON inbox (processed_at);
