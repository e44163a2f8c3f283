// Light globalv1 stream consumers for `bun run bench global`: N streams,
// each on its own HTTP/2 connection (as N agents would be), asking for one
// change set at a time and remembering when each Sync arrived. They frame-
// walk the bytes and decode nothing, so the figures are the brain's.
// Streams open in waves, each wave after the previous one's first sync.
// A stream that breaks is opened again after an agent's backoff.
// stdin: `report` prints `report <json: {streams: per stream [syncs, last sync
// epoch ms], failures: streams that broke}>`;
// `reconnect` closes every stream and opens them all again at once (a brain
// failover: every agent comes back in the same moment), printing
// `reconnected MS` when each has its whole model again.
// The target is a unix socket path, or `tls:PORT:DIR` (loopback TCP, mutual
// TLS with DIR's brain.crt as CA and agent.crt/agent.key as the client's).

import * as http2 from "node:http2";
import { readFileSync } from "node:fs";
import * as net from "node:net";

const [sock, count, wave, mode] = process.argv.slice(2);
/** `stall`: stop this whole process (SIGSTOP) as soon as the first bytes of a model arrive, once: agents stuck mid-model */
const stall = mode === "stall";
const N = Number(count);
const W = Number(wave);
const ASK = Buffer.from([0, 0, 0, 0, 0]); // one empty GlobalWatchReq, gRPC-framed
const WINDOW = 16 << 20;
const syncs = new Array<number>(N).fill(0);
const last = new Array<number>(N).fill(0);
const sessions = new Array<http2.ClientHttp2Session | undefined>(N);
const tls = sock.startsWith("tls:")
  ? (([, port, dir]) => ({
      port,
      creds: { ca: readFileSync(`${dir}/brain.crt`), cert: readFileSync(`${dir}/agent.crt`), key: readFileSync(`${dir}/agent.key`) },
    }))(sock.split(":"))
  : undefined;

let stalled = false;
/** Streams that broke (reset by the brain, a failed connection) and were opened again, as an agent does. */
const failures = new Array<number>(N).fill(0);
/** bumped by `reconnect`: handlers of the streams it closed stand down */
let generation = 0;

/** Opens stream i; resolves at its first Sync, retrying with an agent's backoff (200 ms doubling to 5 s) while it fails. */
function open(i: number): Promise<void> {
  return new Promise((resolve) => {
    const gen = generation;
    let retries = 0;
    const attempt = () => {
      if (gen !== generation) return;
      let dead = false;
      const settings = { initialWindowSize: WINDOW };
      const session = tls
        ? http2.connect(`https://127.0.0.1:${tls.port}`, { settings, ...tls.creds })
        : http2.connect("http://localhost", { settings, createConnection: () => net.connect(sock) });
      const fail = () => {
        if (dead) return;
        dead = true;
        session.destroy();
        if (gen !== generation) return;
        failures[i]++;
        setTimeout(attempt, Math.min(5000, 200 * 2 ** retries++));
      };
      session.once("connect", () => session.setLocalWindowSize(WINDOW));
      session.on("error", fail);
      session.on("close", fail);
      sessions[i] = session;
      const stream = session.request({
        ":method": "POST",
        ":path": "/globalv1.Sets/Watch",
        "content-type": "application/grpc+proto",
        te: "trailers",
      });
      stream.on("error", fail);
      stream.on("close", fail);
      stream.write(ASK);
      // Frame walk: 5-byte header (flag, length), then the message; a Sync OpItem is the 2 bytes 0a 00.
      const hdr = Buffer.alloc(5);
      let hdrPos = 0;
      let remaining = 0;
      let len = 0;
      let first = -1;
      let synced = false;
      const done = () => {
        if (len === 2 && first === 0x0a) {
          syncs[i]++;
          last[i] = performance.timeOrigin + performance.now();
          if (!synced) {
            synced = true;
            retries = 0;
            resolve();
          }
          stream.write(ASK); // flow control: ask for the next change set
        }
        hdrPos = 0;
      };
      stream.on("data", (chunk: Buffer) => {
        if (stall && !stalled) {
          stalled = true; // once: after SIGCONT its streams (reset by then) come back as an agent's would
          process.kill(process.pid, "SIGSTOP");
        }
        let p = 0;
        while (p < chunk.length) {
          if (hdrPos < 5) {
            hdr[hdrPos++] = chunk[p++];
            if (hdrPos === 5) {
              len = hdr.readUInt32BE(1);
              remaining = len;
              first = -1;
              if (len === 0) done();
            }
            continue;
          }
          if (first < 0) first = chunk[p];
          const take = Math.min(remaining, chunk.length - p);
          p += take;
          remaining -= take;
          if (remaining === 0) done();
        }
      });
    };
    attempt();
  });
}

for (let i = 0; i < N; i += W) {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(W, N - i) }, (_, k) => open(i + k)));
  console.log(`wave ${i + Math.min(W, N - i)} ${(performance.now() - t0).toFixed(0)}`);
}
console.log("connected");
for await (const line of console) {
  if (line.trim() === "report")
    console.log(`report ${JSON.stringify({ streams: syncs.map((s, i) => [s, last[i]]), failures: failures.reduce((a, b) => a + b, 0) })}`);
  else if (line.trim() === "reconnect") {
    generation++;
    for (const s of sessions) s?.destroy();
    syncs.fill(0);
    const t0 = performance.now();
    await Promise.all(Array.from({ length: N }, (_, i) => open(i)));
    console.log(`reconnected ${(performance.now() - t0).toFixed(0)}`);
  } else if (line.trim() === "quit") break;
}
generation++;
for (const s of sessions) s?.destroy();
process.exit(0);
