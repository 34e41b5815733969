-- inboxd inbox table for MariaDB (db.dialect "mariadb"). Not tested against a
-- live server: the statement text and error table are unit-tested only.
--
-- DDL commits implicitly in MariaDB, so concurrent creators rely on the IF
-- NOT EXISTS forms. Use a utf8mb4 database with InnoDB (DYNAMIC rows) so the
-- keys fit. Timestamps are UTC.

CREATE TABLE IF NOT EXISTS inbox (
    consumer        varchar(200) NOT NULL,
    message_id      varchar(128) NOT NULL,
    idempotency_key varchar(400) NULL,
    body_sha256     char(64) NOT NULL,
    status          varchar(16) NOT NULL,
    entity          varchar(260) NULL,
    sequence_number bigint NULL,
    delivery_count  int NULL,
    enqueued_at     datetime(3) NULL,
    received_at     datetime(3) NOT NULL,
    processed_at    datetime(3) NOT NULL,
    error_class     varchar(16) NULL,
    error_detail    varchar(2000) NULL,
    CONSTRAINT inbox_pk PRIMARY KEY (consumer, message_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS inbox_idem ON inbox (consumer, idempotency_key);
CREATE INDEX IF NOT EXISTS inbox_processed ON inbox (processed_at);
