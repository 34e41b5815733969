// sbemu-args: --max-message-bytes 8388608
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { client, receiveN, statsWhen } from "../lib.mjs";

// A message past sbemu's piece size (256 KiB) leaves it in pieces as the
// receiver takes them; the official SDK gets every byte, in peek-lock and
// in receive-and-delete, and completes it.
const sha = (b) => createHash("sha256").update(b).digest("hex");

test("a 5 MiB message arrives whole, peek-locked and received-and-deleted", async () => {
  const sb = client();
  try {
    const body = Buffer.alloc(5 * 1024 * 1024);
    for (let i = 0; i < body.length; i++) body[i] = (i * 7 + (i >> 12)) & 0xff;
    const s = sb.createSender("q-large");
    await s.sendMessages({ body, messageId: "big-1" });
    await s.sendMessages({ body, messageId: "big-2" });
    const r = sb.createReceiver("q-large");
    const [m] = await receiveN(r, 1, 20000);
    assert.ok(m, "delivered");
    assert.equal(m.messageId, "big-1");
    assert.equal(m.body.length, body.length);
    assert.equal(sha(m.body), sha(body));
    await r.completeMessage(m);
    const rd = sb.createReceiver("q-large", { receiveMode: "receiveAndDelete" });
    const [m2] = await receiveN(rd, 1, 20000);
    assert.ok(m2, "delivered to receive-and-delete");
    assert.equal(m2.messageId, "big-2");
    assert.equal(sha(m2.body), sha(body));
    const st = await statsWhen((x) => x["q-large"].completed === 1 && x["q-large"].active === 0, 10000);
    assert.equal(st["q-large"].delivered, 2);
  } finally {
    await sb.close();
  }
});
