// sbemu-no-key
import { test } from "node:test";
import assert from "node:assert/strict";
import { client, receiveN } from "../lib.mjs";

test("without --key any token is accepted", async () => {
  const sb = client({ key: "whatever-the-client-has" });
  try {
    await sb.createSender("q-auth").sendMessages({ body: "open" });
    const [m] = await receiveN(sb.createReceiver("q-auth"), 1);
    assert.equal(m.body, "open");
  } finally {
    await sb.close();
  }
});
