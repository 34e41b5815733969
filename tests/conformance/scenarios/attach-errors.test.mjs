import { test } from "node:test";
import assert from "node:assert/strict";
import { client } from "../lib.mjs";

test("attach errors: unknown entity, plain receiver on a session queue, session receiver on a plain queue", async () => {
  const sb = client();
  try {
    await assert.rejects(sb.createReceiver("no-such-queue").receiveMessages(1, { maxWaitTimeInMs: 1000 }),
      (e) => e.code === "MessagingEntityNotFound", "unknown entity");
    await assert.rejects(sb.createSender("no-such-topic").sendMessages({ body: 1 }),
      (e) => e.code === "MessagingEntityNotFound", "unknown entity on send");
    await assert.rejects(sb.createReceiver("q-sess").receiveMessages(1, { maxWaitTimeInMs: 1000 }),
      "a session queue needs a session receiver");
    await assert.rejects(sb.acceptSession("q-basic", "s1"), "a plain queue has no sessions");
  } finally {
    await sb.close();
  }
});
