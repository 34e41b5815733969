import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

// What the SDK's receiveMessages does on a session link: credit n, wait up to
// maxWaitTimeInMs, then flow(drain=true) and wait at most 200 ms for the echo
// (flow with drain=true and link-credit 0, which rhea reports as
// receiver_drained); without the echo it closes the link and the session is
// lost. inboxd relies on the same echo to learn that a session is empty.
test("a drain on a session receiver with nothing available is answered at once, credit consumed, session kept", async () => {
  const sb = client();
  const other = client();
  try {
    const sender = sb.createSender("q-sess-drain");
    await sender.sendMessages({ body: "d1", sessionId: "D" });
    const r = await sb.acceptSession("q-sess-drain", "D");
    const [m1] = await receiveN(r, 1);
    assert.equal(m1.body, "d1");
    await r.completeMessage(m1);

    const started = Date.now();
    const empty = await r.receiveMessages(5, { maxWaitTimeInMs: 300 });
    const took = Date.now() - started;
    assert.equal(empty.length, 0);
    assert.equal(r.isClosed, false, "the drain was echoed: the SDK kept its link");
    assert.equal(r._messageSession.link.credit, 0, "the echo consumed the credit");
    assert.ok(took < 3000, `receiveMessages returned after ${took} ms`);

    // The receiver still holds the session, and a new message reaches it.
    await assert.rejects(other.acceptSession("q-sess-drain", "D"),
      (e) => e.code === "SessionCannotBeLocked", "the session is still held");
    await sender.sendMessages({ body: "d2", sessionId: "D" });
    const [m2] = await receiveN(r, 1);
    assert.equal(m2.body, "d2");
    await r.completeMessage(m2);

    // Drain again with messages of another session available: still empty.
    await sender.sendMessages({ body: "e1", sessionId: "E" });
    const none = await r.receiveMessages(2, { maxWaitTimeInMs: 200 });
    assert.equal(none.length, 0, "a session link never gets another session's message");
    assert.equal(r.isClosed, false);
    await r.close();
  } finally {
    await sb.close();
    await other.close();
  }
});
