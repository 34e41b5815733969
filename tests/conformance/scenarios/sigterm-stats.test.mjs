import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { ServiceBusClient } from "@azure/service-bus";

test("SIGTERM: exit status 0 and a final stats file that includes the last second's work", async () => {
  const dir = mkdtempSync(join(tmpdir(), "sbemu-term-"));
  const stats = join(dir, "stats.json");
  const emu = spawn(process.env.SBEMU_BIN, ["--listen", "127.0.0.1:0", "--topology", process.env.SBEMU_TOPOLOGY,
    "--stats-file", stats], { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => emu.on("exit", (code, signal) => resolve({ code, signal })));
  const port = await new Promise((resolve) => {
    createInterface({ input: emu.stdout }).once("line", (l) => resolve(JSON.parse(l).port));
  });
  const sb = new ServiceBusClient(
    `Endpoint=sb://127.0.0.1:${port}/;SharedAccessKeyName=any;SharedAccessKey=any;UseDevelopmentEmulator=true`,
    { retryOptions: { maxRetries: 0 } });
  try {
    await sb.createSender("q-basic").sendMessages([{ body: 1 }, { body: 2 }, { body: 3 }]);
  } finally {
    await sb.close();
  }
  emu.kill("SIGTERM"); // well inside the 1 s rewrite period after the send
  const { code, signal } = await exited;
  assert.equal(signal, null);
  assert.equal(code, 0);
  const final = JSON.parse(readFileSync(stats, "utf8"));
  assert.equal(final.entities["q-basic"].sent, 3);
  assert.equal(final.entities["q-basic"].active, 3);
  rmSync(dir, { recursive: true, force: true });
});
