// The brain of `bun run bench global`, as its own process (so its RSS is its
// own): a generated cluster in a Brain, the API server on a unix socket (and,
// given a directory of certificates, on loopback TCP with mutual TLS), and
// commands on stdin: `rss` (after a full GC: RSS, peak RSS, streams dropped
// for not reading, JS heap with the buffers it owns), `change I` (one endpoint of
// service I flips ready; prints the epoch ms just before the brain sees it,
// how long the brain's flush took and its CPU time so far in ms), `lag` (the longest the event loop was
// late for a timer since the last `lag`: an agent drops a brain that answers
// no HTTP/2 ping for 3 s), `quit`.

import { heapStats } from "bun:jsc";
import { startApiServer } from "../src/core/api/server/index.ts";
import { createLogger } from "../src/core/log.ts";
import { brainWith, upsert, serviceObjects } from "../test/api/brain-fixture.ts";

const [sock, services, endpoints, nodes, tlsDir] = process.argv.slice(2);
const gen = { services: Number(services), endpoints: Number(endpoints), nodes: Number(nodes) };
const brain = brainWith(gen);
// defaultNodeName outside the cluster: a central brain keeps no node view of its own.
const tls = tlsDir ? { files: { crt: `${tlsDir}/brain.crt`, key: `${tlsDir}/brain.key`, ca: `${tlsDir}/agents-ca.crt` } } : undefined;
const server = await startApiServer({
  brain,
  listen: [`unix://${sock}`, ...(tls ? ["tcp://127.0.0.1:0"] : [])],
  tls,
  defaultNodeName: "central-brain",
  log: createLogger("brain", { level: "warn" }),
});
const flips = new Map<number, boolean>();
let lag = 0;
let tick = performance.now();
setInterval(() => {
  const t = performance.now();
  lag = Math.max(lag, t - tick - 50);
  tick = t;
}, 50);
const tcp = server.addresses.find((a) => a.kind === "tcp");
console.log(`ready${tcp ? ` ${tcp.port}` : ""}`);
for await (const line of console) {
  const [cmd, arg] = line.trim().split(" ");
  if (cmd === "rss") {
    Bun.gc(true);
    const status = await Bun.file("/proc/self/status").text();
    const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(status)![1]) * 1024;
    console.log(`rss ${kb("VmRSS")} ${kb("VmHWM")} ${server.stats.stuckDropped} ${heapStats().heapSize + heapStats().extraMemorySize}`);
  } else if (cmd === "change") {
    const i = Number(arg);
    const [, slice] = serviceObjects(gen, i);
    const ready = flips.get(i) ?? false;
    flips.set(i, !ready);
    slice.endpoints[0].conditions.ready = ready;
    // The CPU time used so far, after the bench made its objects: what the change costs the brain is counted from here.
    const cpu = process.cpuUsage();
    const t0 = performance.timeOrigin + performance.now();
    upsert(brain, slice);
    console.log(`changed ${t0} ${(performance.timeOrigin + performance.now() - t0).toFixed(2)} ${(cpu.user + cpu.system) / 1000}`);
  } else if (cmd === "lag") {
    console.log(`lag ${lag.toFixed(0)}`);
    lag = 0;
  } else if (cmd === "quit") break;
}
await server.close();
process.exit(0);
