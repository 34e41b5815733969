import { test } from "node:test";
import assert from "node:assert/strict";
import { client } from "../lib.mjs";

test("peekMessages returns messages in order without locking them", async () => {
  const sb = client();
  try {
    await sb.createSender("q-peek").sendMessages([{ body: "p1" }, { body: "p2" }, { body: "p3" }]);
    const r = sb.createReceiver("q-peek");
    const first = await r.peekMessages(2);
    assert.deepEqual(first.map((m) => m.body), ["p1", "p2"]);
    const next = await r.peekMessages(5);
    assert.deepEqual(next.map((m) => m.body), ["p3"], "continues after the last peeked");
    const rest = await r.peekMessages(5);
    assert.equal(rest.length, 0);
    const got = await r.receiveMessages(3, { maxWaitTimeInMs: 2000 });
    assert.equal(got.length, 3, "peeked messages are still available");
  } finally {
    await sb.close();
  }
});
