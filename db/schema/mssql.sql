-- inboxd inbox table for SQL Server / Azure SQL (db.dialect "mssql").
--
-- inboxd creates this itself when db.migrate is true (under sp_getapplock,
-- so replicas starting together do not race). With db.migrate false a DBA
-- runs this script once; inboxd then only checks that the table exists with
-- every column and a unique key on exactly (consumer, message_id).
--
-- The table name is db.inbox_table (here dbo.inbox); index names derive
-- from its last part. Timestamps are UTC. body_sha256 is the lowercase hex
-- SHA-256 of the message body. status: processed | failed | uncertain.
-- The filtered unique index needs SQL Server 2016+ for its 1200-byte key.
--
-- The key columns compare in a binary collation (Latin1_General_100_BIN2):
-- ids differing only in case are different keys, as on PostgreSQL and as
-- inboxd's batch compares them. A table created before this collation was
-- set keeps the database's default (often case-insensitive: "A1" and "a1"
-- are then one key on SQL Server only); ALTER the three columns to match.
-- The retention index holds processed rows only: the sweep reads nothing
-- else. An older unfiltered IX_inbox_processed is kept as it is.
--
-- Batches are separated by GO (sqlcmd / SSMS). Filtered indexes need
-- QUOTED_IDENTIFIER ON (error 1934), which classic sqlcmd leaves OFF: the
-- script sets it first.

SET QUOTED_IDENTIFIER ON
GO
IF OBJECT_ID(N'dbo.inbox', N'U') IS NULL
CREATE TABLE dbo.inbox (
    consumer        nvarchar(200) COLLATE Latin1_General_100_BIN2 NOT NULL,
    message_id      nvarchar(128) COLLATE Latin1_General_100_BIN2 NOT NULL,
    idempotency_key nvarchar(400) COLLATE Latin1_General_100_BIN2 NULL,
    body_sha256     char(64) NOT NULL,
    status          varchar(16) NOT NULL,
    entity          nvarchar(260) NULL,
    sequence_number bigint NULL,
    delivery_count  int NULL,
    enqueued_at     datetime2(3) NULL,
    received_at     datetime2(3) NOT NULL,
    processed_at    datetime2(3) NOT NULL,
    error_class     varchar(16) NULL,
    error_detail    nvarchar(2000) NULL,
    CONSTRAINT PK_inbox PRIMARY KEY CLUSTERED (consumer, message_id)
)
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inbox') AND name = N'UX_inbox_idem')
CREATE UNIQUE NONCLUSTERED INDEX UX_inbox_idem ON dbo.inbox (consumer, idempotency_key)
    WHERE idempotency_key IS NOT NULL
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inbox') AND name = N'IX_inbox_processed')
CREATE NONCLUSTERED INDEX IX_inbox_processed ON dbo.inbox (processed_at)
    WHERE status = 'processed'
GO
