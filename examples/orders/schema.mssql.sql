-- The business table of the orders example (SQL Server).
IF OBJECT_ID(N'dbo.orders', N'U') IS NULL
CREATE TABLE dbo.orders (
    order_id     nvarchar(100) NOT NULL PRIMARY KEY,
    customer     nvarchar(200) NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    message_id   nvarchar(128) NOT NULL,
    placed_at    datetime2 NULL
);
