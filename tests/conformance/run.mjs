// Runs one conformance scenario file against a fresh sbemu:
//   node run.mjs <sbemu binary> <topology.json> <scenario.test.mjs>
// Starts sbemu on 127.0.0.1:0 with a SAS key and a stats file, reads the
// {"event":"listening","port":N} line, runs the scenario with node:test,
// then stops sbemu with SIGTERM and requires a clean exit (status 0) and a
// final stats file.
import { execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const [sbemu, topology, scenario] = process.argv.slice(2);
if (!sbemu || !topology || !scenario) {
  console.error("usage: node run.mjs SBEMU TOPOLOGY SCENARIO");
  process.exit(2);
}
if (!existsSync(join(here, "node_modules", "@azure", "service-bus"))) {
  console.error(
    `conformance: ${join(here, "node_modules")} is missing; run 'npm ci' in ${here} (scripts/test does this)`
  );
  process.exit(1);
}

// A scenario may ask for extra sbemu flags with a line "// sbemu-args: ..."
// (fault injection), or for no SAS key at all with "// sbemu-no-key".
const scenarioText = readFileSync(scenario, "utf8");
const argsLine = scenarioText.match(/^\/\/ sbemu-args: (.*)$/m);
const extraArgs = argsLine ? argsLine[1].trim().split(/\s+/) : [];
const noKey = /^\/\/ sbemu-no-key$/m.test(scenarioText);

const KEY_NAME = "RootManageSharedAccessKey";
const KEY = "c2JlbXUtY29uZm9ybWFuY2Uta2V5LTAxMjM0NTY3ODk=";
const dir = mkdtempSync(join(tmpdir(), "sbemu-conf-"));
// "// sbemu-tls": a throw-away self-signed certificate for localhost and
// 127.0.0.1; sbemu gets it with --tls-cert/--tls-key and the scenario's
// Node process trusts it through NODE_EXTRA_CA_CERTS.
const tls = /^\/\/ sbemu-tls$/m.test(scenarioText);
const tlsArgs = [];
const tlsEnv = {};
if (tls) {
  const cert = join(dir, "cert.pem"), keyFile = join(dir, "key.pem");
  execFileSync("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
    "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
    "-keyout", keyFile, "-out", cert], { stdio: "ignore" });
  tlsArgs.push("--tls-cert", cert, "--tls-key", keyFile);
  tlsEnv.NODE_EXTRA_CA_CERTS = cert;
}
// "// sbemu-http": the management endpoint on a port of its own (HTTPS when
// the scenario also asks for sbemu-tls), as SBEMU_HTTP_PORT.
const http = /^\/\/ sbemu-http$/m.test(scenarioText);
const httpArgs = http ? ["--http-listen", "127.0.0.1:0"] : [];
// "// sbemu-ws": AMQP over WebSockets on a port of its own (wss:// with
// sbemu-tls), as SBEMU_WS_PORT.
const ws = /^\/\/ sbemu-ws$/m.test(scenarioText);
const wsArgs = ws ? ["--ws-listen", "127.0.0.1:0"] : [];
const stats = join(dir, "stats.json");
const emu = spawn(
  sbemu,
  ["--listen", "127.0.0.1:0", "--topology", topology,
   ...(noKey ? [] : ["--key-name", KEY_NAME, "--key", KEY]),
   "--stats-file", stats, "--log-level", "warn", ...tlsArgs, ...httpArgs, ...wsArgs, ...extraArgs],
  { stdio: ["ignore", "pipe", "inherit"] }
);
const emuExit = new Promise((resolve) => emu.on("exit", (code, signal) => resolve({ code, signal })));

let httpPort = "", wsPort = "";
const port = await new Promise((resolve, reject) => {
  const rl = createInterface({ input: emu.stdout });
  const timer = setTimeout(() => reject(new Error("sbemu did not report listening within 10 s")), 10000);
  rl.once("line", (line) => {
    clearTimeout(timer);
    try {
      const ev = JSON.parse(line);
      if (ev.event !== "listening" || !ev.port || (http && !ev.http_port) || (ws && !ev.ws_port))
        throw new Error(line);
      httpPort = String(ev.http_port || "");
      wsPort = String(ev.ws_port || "");
      resolve(ev.port);
    } catch (e) {
      reject(new Error(`unexpected first line from sbemu: ${line}`));
    }
    rl.on("line", (l) => process.stderr.write(`[sbemu] ${l}\n`));
  });
  emu.once("exit", (code) => reject(new Error(`sbemu exited early with ${code}`)));
});

const child = spawn(process.execPath, ["--test", "--test-reporter=spec", scenario], {
  stdio: "inherit",
  env: { ...process.env, SBEMU_PORT: String(port), SBEMU_KEY_NAME: KEY_NAME, SBEMU_KEY: KEY,
         SBEMU_STATS: stats, SBEMU_HTTP_PORT: httpPort, SBEMU_WS_PORT: wsPort, SBEMU_BIN: sbemu, SBEMU_TOPOLOGY: topology, ...tlsEnv },
});
const testCode = await new Promise((resolve) => child.on("exit", (code) => resolve(code ?? 1)));

emu.kill("SIGTERM");
const killer = setTimeout(() => {
  console.error("conformance: sbemu still running 10 s after SIGTERM; killing it");
  emu.kill("SIGKILL");
}, 10000);
const { code, signal } = await emuExit;
clearTimeout(killer);
let status = testCode;
if (code !== 0) {
  console.error(`conformance: sbemu did not stop cleanly on SIGTERM (code ${code}, signal ${signal})`);
  status = status || 1;
}
try {
  JSON.parse(readFileSync(stats, "utf8"));
} catch (e) {
  console.error(`conformance: no valid final stats file: ${e.message}`);
  status = status || 1;
}
rmSync(dir, { recursive: true, force: true });
process.exit(status);
