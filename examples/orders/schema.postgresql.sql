-- The business table of the orders example (PostgreSQL).
CREATE TABLE IF NOT EXISTS orders (
    order_id     text PRIMARY KEY,
    customer     text NOT NULL,
    amount_cents bigint NOT NULL CHECK (amount_cents >= 0),
    message_id   text NOT NULL,
    placed_at    timestamptz
);
