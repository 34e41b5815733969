-- inboxd outbox table for SQL Server / Azure SQL (db.dialect "mssql"); name: outbox.table (here dbo.inboxd_outbox).
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
--   ALTER TABLE dbo.inboxd_outbox ADD trace_context nvarchar(128)
-- The table has filtered indexes: every session that inserts into it needs
-- QUOTED_IDENTIFIER ON (and the other ANSI settings ODBC, JDBC and .NET
-- clients set), or the INSERT fails with error 1934. A stored procedure
-- keeps the QUOTED_IDENTIFIER it was created with: create procedures that
-- insert here with it ON (classic sqlcmd and some tools default to OFF).
-- Batches are separated by GO (sqlcmd / SSMS); this script sets
-- QUOTED_IDENTIFIER ON first.

SET QUOTED_IDENTIFIER ON
GO

IF OBJECT_ID(N'dbo.inboxd_outbox', N'U') IS NULL
CREATE TABLE dbo.inboxd_outbox (
    id             bigint IDENTITY(1,1) NOT NULL PRIMARY KEY CLUSTERED,
    entity         nvarchar(260) NOT NULL,
    message_id     nvarchar(128) NOT NULL,
    session_id     nvarchar(128) NULL,
    subject        nvarchar(260) NULL,
    correlation_id nvarchar(128) NULL,
    content_type   nvarchar(260) NULL,
    properties     nvarchar(max) NULL,
    body           nvarchar(max) NULL,
    created_at     datetime2(3) NOT NULL DEFAULT SYSUTCDATETIME(),
    status         varchar(16) NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'published', 'failed')),
    attempts       int NOT NULL DEFAULT 0,
    last_error     nvarchar(2000) NULL,
    published_at   datetime2(3) NULL,
    trace_context  nvarchar(128) NULL
)
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inboxd_outbox') AND name = N'IX_inboxd_outbox_pending')
CREATE NONCLUSTERED INDEX IX_inboxd_outbox_pending ON dbo.inboxd_outbox (id) WHERE status = 'pending'
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inboxd_outbox') AND name = N'IX_inboxd_outbox_session')
CREATE NONCLUSTERED INDEX IX_inboxd_outbox_session ON dbo.inboxd_outbox (session_id, id) WHERE status = 'pending'
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inboxd_outbox') AND name = N'IX_inboxd_outbox_failed')
CREATE NONCLUSTERED INDEX IX_inboxd_outbox_failed ON dbo.inboxd_outbox (session_id, id) WHERE status = 'failed'
GO
IF NOT EXISTS (SELECT 1 FROM sys.indexes WHERE object_id = OBJECT_ID(N'dbo.inboxd_outbox') AND name = N'IX_inboxd_outbox_published')
CREATE NONCLUSTERED INDEX IX_inboxd_outbox_published ON dbo.inboxd_outbox (published_at) WHERE status = 'published'
GO
