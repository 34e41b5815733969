-- inboxd outbox table for MariaDB (db.dialect "mariadb"); name: outbox.table (here inboxd_outbox).
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
--   ALTER TABLE inboxd_outbox ADD trace_context varchar(128)
-- Not tested against a live server: the statement text is unit-tested only.

CREATE TABLE IF NOT EXISTS inboxd_outbox (
    id             bigint NOT NULL AUTO_INCREMENT PRIMARY KEY,
    entity         varchar(260) NOT NULL,
    message_id     varchar(128) NOT NULL,
    session_id     varchar(128) NULL,
    subject        varchar(260) NULL,
    correlation_id varchar(128) NULL,
    content_type   varchar(260) NULL,
    properties     longtext NULL,
    body           longtext NULL,
    created_at     datetime(3) NOT NULL DEFAULT UTC_TIMESTAMP(3),
    status         varchar(16) NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'published', 'failed')),
    attempts       int NOT NULL DEFAULT 0,
    last_error     varchar(2000) NULL,
    published_at   datetime(3) NULL,
    trace_context  varchar(128) NULL
);
CREATE INDEX IF NOT EXISTS inboxd_outbox_pending ON inboxd_outbox (status, id);
CREATE INDEX IF NOT EXISTS inboxd_outbox_session ON inboxd_outbox (session_id, status, id);
CREATE INDEX IF NOT EXISTS inboxd_outbox_published ON inboxd_outbox (status, published_at);
