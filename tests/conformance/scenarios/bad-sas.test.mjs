import { test } from "node:test";
import assert from "node:assert/strict";
import { client, statsWhen } from "../lib.mjs";

test("a bad SAS key is refused with an auth error and nothing is stored", async () => {
  const sb = client({ key: "not-the-key" });
  try {
    await assert.rejects(sb.createSender("q-auth").sendMessages({ body: "x" }),
      (e) => e.code === "UnauthorizedAccess", "UnauthorizedAccess");
    const r = sb.createReceiver("q-auth");
    await assert.rejects(r.receiveMessages(1, { maxWaitTimeInMs: 1000 }),
      (e) => e.code === "UnauthorizedAccess");
  } finally {
    await sb.close();
  }
  const st = await statsWhen(() => true);
  assert.equal(st["q-auth"].sent, 0);
});
