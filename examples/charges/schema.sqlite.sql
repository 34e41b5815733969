CREATE TABLE charges (
    order_id     TEXT PRIMARY KEY,
    charge_id    TEXT NOT NULL,
    amount_cents INTEGER NOT NULL
);
