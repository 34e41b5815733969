// sbemu-tls
// sbemu-ws
import { test } from "node:test";
import assert from "node:assert/strict";
import { ServiceBusClient } from "@azure/service-bus";
import WebSocket from "ws";
import { client, key, keyName, receiveN, statsWhen } from "../lib.mjs";

const wsPort = process.env.SBEMU_WS_PORT;

// The SDK in WebSocket mode: wss://127.0.0.1:WS/$servicebus/websocket/ with AMQPWSB10.
function wsClient() {
  return new ServiceBusClient(
    `Endpoint=sb://127.0.0.1:${wsPort}/;SharedAccessKeyName=${keyName};SharedAccessKey=${key}`,
    { webSocketOptions: { webSocket: WebSocket }, retryOptions: { maxRetries: 0, timeoutInMs: 10000 } });
}

test("--ws-listen: the SDK over WebSockets sends, peek-locks, renews, completes and dead-letters; a plain client sees the same queue", async () => {
  const sb = wsClient();
  const plain = client();
  try {
    const big = "x".repeat(200000); // frames far past one WebSocket read
    await sb.createSender("q-basic").sendMessages([
      { body: "ws-1", messageId: "w-1" }, { body: big, messageId: "w-2" }, { body: "ws-3", messageId: "w-3" }]);
    const r = sb.createReceiver("q-basic");
    const got = await receiveN(r, 3);
    assert.deepEqual(got.map((m) => m.messageId).sort(), ["w-1", "w-2", "w-3"]);
    assert.equal(got.find((m) => m.messageId === "w-2").body.length, big.length);
    const w1 = got.find((m) => m.messageId === "w-1");
    await r.renewMessageLock(w1);
    await r.completeMessage(w1);
    await r.completeMessage(got.find((m) => m.messageId === "w-2"));
    await r.deadLetterMessage(got.find((m) => m.messageId === "w-3"), { deadLetterReason: "over-ws" });
    const [dl] = await receiveN(plain.createReceiver("q-basic", { subQueueType: "deadLetter" }), 1);
    assert.equal(dl.messageId, "w-3");
    assert.equal(dl.deadLetterReason, "over-ws");
    const st = await statsWhen((s) => s["q-basic"].completed === 2);
    assert.equal(st["q-basic"].completed, 2);
  } finally {
    await sb.close();
    await plain.close();
  }
});
