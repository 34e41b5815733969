-- The business table of the orders example (SQLite).
CREATE TABLE IF NOT EXISTS orders (
    order_id    TEXT PRIMARY KEY,
    customer    TEXT NOT NULL,
    amount_cents INTEGER NOT NULL CHECK (amount_cents >= 0),
    message_id  TEXT NOT NULL,
    placed_at   TEXT
);
