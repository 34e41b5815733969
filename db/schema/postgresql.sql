-- inboxd inbox table for PostgreSQL (db.dialect "postgresql").
--
-- inboxd creates this itself when db.migrate is true (in one transaction
-- under pg_advisory_xact_lock, so replicas starting together do not race).
-- With db.migrate false a DBA runs this script once; inboxd then only
-- checks that the table exists with every column and a unique key on
-- exactly (consumer, message_id).
--
-- The table name is db.inbox_table (here inbox); index names derive from
-- it. Timestamps are UTC without a zone. body_sha256 is the lowercase hex
-- SHA-256 of the message body. status: processed | failed | uncertain.

CREATE TABLE IF NOT EXISTS inbox (
    consumer        varchar(200) NOT NULL,
    message_id      varchar(128) NOT NULL,
    idempotency_key varchar(400) NULL,
    body_sha256     char(64) NOT NULL,
    status          varchar(16) NOT NULL,
    entity          varchar(260) NULL,
    sequence_number bigint NULL,
    delivery_count  integer NULL,
    enqueued_at     timestamp(3) NULL,
    received_at     timestamp(3) NOT NULL,
    processed_at    timestamp(3) NOT NULL,
    error_class     varchar(16) NULL,
    error_detail    varchar(2000) NULL,
    CONSTRAINT inbox_pk PRIMARY KEY (consumer, message_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS inbox_idem ON inbox (consumer, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS inbox_processed ON inbox (processed_at);
