// sbemu-args: --fault-ignore-dead-letter 1
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN, statsWhen } from "../lib.mjs";

test("--fault-ignore-dead-letter: the dead letter is neither applied nor answered; the message comes back when its lock ends", async () => {
  const sb = client({ timeoutInMs: 2000 });
  try {
    await sb.createSender("q-dlq").sendMessages({ body: "lost-dl", messageId: "idl-1" });
    const r = sb.createReceiver("q-dlq");
    const [m] = await receiveN(r, 1);
    await assert.rejects(r.deadLetterMessage(m, { deadLetterReason: "poison" }), "no reply: the SDK times out");
    await r.close();
    const st = await statsWhen((s) => s["q-dlq"].active === 1, 8000);
    assert.equal(st["q-dlq"].dead_lettered, 0, "the broker never applied the dead letter");
    assert.equal(st["q-dlq/$DeadLetterQueue"].active, 0);
    const [again] = await receiveN(sb.createReceiver("q-dlq"), 1);
    assert.equal(again.messageId, "idl-1");
  } finally {
    await sb.close();
  }
});
