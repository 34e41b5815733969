// sbemu-tls
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import { client, key, keyName, port, receiveN } from "../lib.mjs";

test("--tls-cert/--tls-key: the SDK connects with TLS (no emulator flag); plain clients still work on the same port", async () => {
  // Without UseDevelopmentEmulator the SDK speaks AMQPS to the given port.
  const tlsClient = new ServiceBusClient(
    `Endpoint=sb://127.0.0.1:${port}/;SharedAccessKeyName=${keyName};SharedAccessKey=${key}`,
    { retryOptions: { maxRetries: 0, timeoutInMs: 10000 } });
  const plain = client();
  try {
    await tlsClient.createSender("q-basic").sendMessages({ body: "over-tls", messageId: "t-1" });
    const [m] = await receiveN(plain.createReceiver("q-basic"), 1);
    assert.equal(m.body, "over-tls");
    const r = tlsClient.createReceiver("q-basic");
    await plain.createSender("q-basic").sendMessages({ body: "back" });
    const [m2] = await receiveN(r, 1);
    assert.equal(m2.body, "back");
    await r.completeMessage(m2);
  } finally {
    await tlsClient.close();
    await plain.close();
  }
});
