// Light globalv1 stream consumers for `bun run bench global`: N streams,
// each on its own HTTP/2 connection (as N agents would be), asking for one
// change set at a time and remembering when each Sync arrived. They frame-
// walk the bytes and decode nothing, so the figures are the brain's.
// Streams open in waves, each wave after the previous one's first sync.
// stdin: `report` prints `report <json: per stream [syncs, last sync epoch ms]>`.
// The target is a unix socket path, or `tls:PORT:DIR` (loopback TCP, mutual
// TLS with DIR's brain.crt as CA and agent.crt/agent.key as the client's).

import * as http2 from "node:http2";
import { readFileSync } from "node:fs";
import * as net from "node:net";

const [sock, count, wave, mode] = process.argv.slice(2);
/** `stall`: stop this whole process (SIGSTOP) as soon as the first bytes of a model arrive: agents stuck mid-model */
const stall = mode === "stall";
const N = Number(count);
const W = Number(wave);
const ASK = Buffer.from([0, 0, 0, 0, 0]); // one empty GlobalWatchReq, gRPC-framed
const WINDOW = 16 << 20;
const syncs = new Array<number>(N).fill(0);
const last = new Array<number>(N).fill(0);
const sessions: http2.ClientHttp2Session[] = [];
const tls = sock.startsWith("tls:")
  ? (([, port, dir]) => ({ port, creds: { ca: readFileSync(`${dir}/brain.crt`), cert: readFileSync(`${dir}/agent.crt`), key: readFileSync(`${dir}/agent.key`) } }))(sock.split(":"))
  : undefined;

function open(i: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const settings = { initialWindowSize: WINDOW };
    const session = tls ? http2.connect(`https://127.0.0.1:${tls.port}`, { settings, ...tls.creds }) : http2.connect("http://localhost", { settings, createConnection: () => net.connect(sock) });
    session.once("connect", () => session.setLocalWindowSize(WINDOW));
    session.on("error", reject);
    sessions.push(session);
    const stream = session.request({ ":method": "POST", ":path": "/globalv1.Sets/Watch", "content-type": "application/grpc+proto", te: "trailers" });
    stream.on("error", reject);
    stream.write(ASK);
    // Frame walk: 5-byte header (flag, length), then the message; a Sync OpItem is the 2 bytes 0a 00.
    const hdr = Buffer.alloc(5);
    let hdrPos = 0;
    let remaining = 0;
    let len = 0;
    let first = -1;
    const done = () => {
      if (len === 2 && first === 0x0a) {
        syncs[i]++;
        last[i] = performance.timeOrigin + performance.now();
        if (syncs[i] === 1) resolve();
        stream.write(ASK); // flow control: ask for the next change set
      }
      hdrPos = 0;
    };
    stream.on("data", (chunk: Buffer) => {
      if (stall) process.kill(process.pid, "SIGSTOP");
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
  });
}

for (let i = 0; i < N; i += W) {
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(W, N - i) }, (_, k) => open(i + k)));
  console.log(`wave ${i + Math.min(W, N - i)} ${(performance.now() - t0).toFixed(0)}`);
}
console.log("connected");
for await (const line of console) {
  if (line.trim() === "report") console.log(`report ${JSON.stringify(syncs.map((s, i) => [s, last[i]]))}`);
  else if (line.trim() === "quit") break;
}
for (const s of sessions) s.destroy();
process.exit(0);
