// gate.mjs - a TCP gate in front of Azurite for the claim-check outage: it
// forwards 127.0.0.1:PORT to the target port; SIGHUP closes its listener
// (connections refused, the storage "down"), SIGUSR2 opens it again on the
// same port at once, with no Azurite restart. Prints {"port": N} when
// listening, then "closed" / "open" after each change, one line each.
//
//   node gate.mjs TARGET_PORT
import net from "node:net";

const target = Number(process.argv[2]);
let port = 0;
let server = null;
const conns = new Set();

function open() {
  server = net.createServer((c) => {
    const up = net.connect(target, "127.0.0.1");
    conns.add(c);
    conns.add(up);
    c.pipe(up).pipe(c);
    const end = () => { c.destroy(); up.destroy(); conns.delete(c); conns.delete(up); };
    c.on("error", end).on("close", end);
    up.on("error", end).on("close", end);
  });
  server.listen(port, "127.0.0.1", () => {
    const first = port === 0;
    port = server.address().port;
    console.log(first ? JSON.stringify({ port }) : "open");
  });
}

process.on("SIGHUP", () => {
  server.close(() => console.log("closed"));
  for (const c of conns) c.destroy();
});
process.on("SIGUSR2", open);
setInterval(() => {}, 1 << 30); // alive while closed (no listener keeps the loop going then)
open();
