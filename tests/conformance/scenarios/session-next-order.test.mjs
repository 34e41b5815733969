import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, sleep } from "../lib.mjs";

// Service Bus documents acceptNextSession as taking "the next unlocked session
// that contains active messages" without naming an order. sbemu picks the
// session whose oldest active message is the oldest, and serves accepts that
// wait for a session in the order they arrived: no session and no waiting
// receiver is passed over for ever.
async function drainSession(r, n) {
  const got = await receiveN(r, n);
  for (const m of got) await r.completeMessage(m);
  await r.close();
  return got.map((m) => m.body);
}

test("acceptNextSession takes the session of the oldest message first", async () => {
  const sb = client({ timeoutInMs: 3000 });
  try {
    await sb.createSender("q-sess-pick").sendMessages([
      { body: "c1", sessionId: "C" }, { body: "a1", sessionId: "A" }, { body: "b1", sessionId: "B" },
      { body: "c2", sessionId: "C" }, { body: "a2", sessionId: "A" },
    ]);
    const order = [];
    const rs = [];
    for (let i = 0; i < 3; i++) {
      const r = await sb.acceptNextSession("q-sess-pick");
      order.push(r.sessionId);
      rs.push(r);
    }
    assert.deepEqual(order, ["C", "A", "B"]);
    assert.deepEqual(await drainSession(rs[0], 2), ["c1", "c2"]);
    assert.deepEqual(await drainSession(rs[1], 2), ["a1", "a2"]);
    assert.deepEqual(await drainSession(rs[2], 1), ["b1"]);
  } finally {
    await sb.close();
  }
});

test("accepts waiting for a session are served in arrival order", async () => {
  // Separate connections, so the order is the broker's and not one connection's.
  const first = client({ timeoutInMs: 8000 });
  const second = client({ timeoutInMs: 8000 });
  const sb = client();
  try {
    const sender = sb.createSender("q-sess-pick");
    const settled = (p) => Promise.race([p.then(() => true, () => true), sleep(300).then(() => false)]);
    const w1 = first.acceptNextSession("q-sess-pick");
    await sleep(300);
    const w2 = second.acceptNextSession("q-sess-pick");
    await sleep(300);
    assert.equal(await settled(w1), false, "nothing to accept yet");
    await sender.sendMessages({ body: "x1", sessionId: "X" });
    const r1 = await w1;
    assert.equal(r1.sessionId, "X", "the first waiter gets the first session");
    assert.equal(await settled(w2), false, "the second waiter still waits");
    await sender.sendMessages({ body: "y1", sessionId: "Y" });
    const r2 = await w2;
    assert.equal(r2.sessionId, "Y");
    assert.deepEqual(await drainSession(r1, 1), ["x1"]);
    assert.deepEqual(await drainSession(r2, 1), ["y1"]);
  } finally {
    await sb.close();
    await first.close();
    await second.close();
  }
});
