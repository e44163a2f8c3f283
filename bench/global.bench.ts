// One brain for many nodes: a central brain (its own process) holding a
// 10,000-service x 10-endpoint cluster serves the globalv1 stream to N-2
// light consumers (bench/global-consumers.ts: one HTTP/2 connection each,
// spread over processes of at most 1,000 streams; they frame-walk and decode
// nothing) plus 2 real node agents (`kpng --api`, nft backend, each in its
// own network namespace). The brain, GLOBAL_BENCH_BRAIN:
//   - "real" (the default): the compiled `kpng serve --kubeconfig` reading the
//     real kube-apiserver + etcd, with the TLS serving flags an operator
//     passes (bench/global-real-brain.ts; the cluster of bench/bench-api.ts,
//     100 nodes); a change is a PATCH of an EndpointSlice;
//   - "generated": bench/global-brain.ts, a Brain fed a generated cluster of
//     1,000 nodes in process, which also reports its JS heap and how late its
//     event loop ran (agents drop a brain that answers no ping for 3 s).
// Prints: brain RSS at 10 and at N streams and what a stream costs; one
// endpoint change to every stream (p50/p99/max, the brain's CPU time for it)
// and to the agents' kernels; a failover (every light stream reconnecting at
// once: how long until all have their model again, the brain's peak RSS
// meanwhile); agent RSS against the full binary's (same node, same backend,
// the same cluster). The light streams use loopback TCP with mutual TLS, as
// deployed agents do (GLOBAL_BENCH_TLS=0: the unix socket; generated brain
// only); the 2 agents stay on the unix socket, which reaches into their
// network namespaces. Then stuck consumers: 10 streams that stop reading
// between change sets, and 10 that stop mid-model (dropped after the brain's
// 30 s limit, then back): the brain's RSS with them against without. At the
// end, whether any stream is behind for good: every stream's last change set
// against the last change. Needs root (nft in namespaces).
// `bun run bench global`; GLOBAL_BENCH_STREAMS=N (default 1,000; 5,000 is
// Kubernetes' largest cluster), GLOBAL_BENCH_SERVICES (default 10,000),
// GLOBAL_BENCH_PER_PROCESS, GLOBAL_BENCH_FAILOVER=0 (leaves the failover
// out), GLOBAL_BENCH_CONNECT_S (default 900: how long the streams may take to
// connect; past it, how many did), and GLOBAL_BENCH_PROFILE=DIR for a CPU
// profile of the generated brain.

import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { genCluster } from "../test/api/gen-cluster.ts";
import { FREE_PORTS } from "../test/harness/kpng-process.ts";
import { makeMutualTls } from "../test/harness/tls-flags.ts";
import { closeApis } from "./bench-api.ts";
import { type BenchBrain, realBrain } from "./global-real-brain.ts";
import { treeCpuMs } from "./proc-cpu.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const GEN = { services: Number(process.env.GLOBAL_BENCH_SERVICES ?? 10_000), endpoints: 10, nodes: 1_000 };
const STREAMS = Number(process.env.GLOBAL_BENCH_STREAMS ?? 1000);
const REAL = (process.env.GLOBAL_BENCH_BRAIN ?? "real") !== "generated";
const TLS = REAL || process.env.GLOBAL_BENCH_TLS !== "0";
const FAILOVER = process.env.GLOBAL_BENCH_FAILOVER !== "0";
/** how long the streams may take to connect, each with its whole model (GLOBAL_BENCH_CONNECT_S) */
const CONNECT_MS = Number(process.env.GLOBAL_BENCH_CONNECT_S ?? 900) * 1000;
const mb = (n: number) => `${(n / 1e6).toFixed(0)} MB`;
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((xs.length * p) / 100))];

export interface Proc {
  p: Bun.Subprocess<"pipe", "pipe", "pipe">;
  out: string[];
  err: string[];
  send(line: string): void;
  wait(re: RegExp, from?: number, stream?: "out" | "err", timeoutMs?: number): Promise<string>;
}

export function spawn(cmd: string[]): Proc {
  const p = Bun.spawn(cmd, { cwd: ROOT, stdin: "pipe", stdout: "pipe", stderr: "pipe", env: { ...process.env, HOME: "/dev/null" } });
  const out: string[] = [];
  const err: string[] = [];
  const pump = async (s: ReadableStream<Uint8Array>, into: string[]) => {
    let rest = "";
    const dec = new TextDecoder();
    for await (const c of s) {
      const lines = (rest + dec.decode(c, { stream: true })).split("\n");
      rest = lines.pop()!;
      into.push(...lines);
    }
  };
  void pump(p.stdout, out);
  void pump(p.stderr, err);
  return {
    p,
    out,
    err,
    send: (line) => {
      p.stdin.write(line + "\n");
      p.stdin.flush();
    },
    async wait(re, from = 0, stream = "out", timeoutMs = 600_000) {
      const lines = stream === "out" ? out : err;
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const hit = lines.slice(from).find((l) => re.test(l));
        if (hit) return hit;
        if (p.exitCode !== null) throw new Error(`${cmd.join(" ")} exited ${p.exitCode}\n${err.slice(-10).join("\n")}`);
        if (Date.now() > deadline) throw new Error(`timeout waiting for ${re}\n${err.slice(-10).join("\n")}`);
        await Bun.sleep(20);
      }
    },
  };
}

export const rssOf = (pid: number) => {
  const s = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+)/.exec(s)![1]) * 1024;
};
const logTime = (line: string) => Date.parse(line.slice(0, 24));
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
/** Resets a process's peak RSS (VmHWM) to its current RSS. */
const resetPeak = (pid: number) => writeFileSync(`/proc/${pid}/clear_refs`, "5");

/**
 * The most streams one consumer process holds: one event loop frame-walking
 * 5,000 TLS streams measures itself more than the brain, so they are spread
 * over processes as they are over nodes.
 */
const PER_PROCESS = Number(process.env.GLOBAL_BENCH_PER_PROCESS ?? 1000);

interface Report {
  streams: Array<[number, number]>;
  failures: number;
}

/** n light streams in processes of at most PER_PROCESS, each opening its share in waves of `wave`. */
function consumerGroup(n: number, wave: number, mode: string, brain: BenchBrain, procs: Proc[]) {
  const group: Proc[] = [];
  for (let left = n; left > 0; left -= PER_PROCESS) {
    const c = spawn([
      ...brain.wrap,
      BUN,
      join(ROOT, "bench/global-consumers.ts"),
      brain.target,
      String(Math.min(PER_PROCESS, left)),
      String(wave),
      mode,
    ]);
    procs.push(c);
    group.push(c);
  }
  const ask = async (c: Proc, cmd: string, re: RegExp, timeoutMs?: number) => {
    const from = c.out.length;
    c.send(cmd);
    return (await c.wait(re, from, "out", timeoutMs)).replace(re, "");
  };
  return {
    procs: group,
    /** every stream has had its whole model; past CONNECT_MS, an error saying how many had (each process's last wave) */
    connected: () =>
      Promise.all(group.map((c) => c.wait(/^connected/, 0, "out", CONNECT_MS))).catch((err) => {
        const had = group.map((c) => Number(c.out.findLast((l) => l.startsWith("wave "))?.split(" ")[1] ?? 0));
        throw new Error(
          `${had.reduce((a, b) => a + b, 0)} of ${n} streams had their whole model after ${CONNECT_MS / 1000} s (per process: ${had.join(", ")}; load ${load()}): ${err}`,
        );
      }),
    report: () => Promise.all(group.map(async (c) => JSON.parse(await ask(c, "report", /^report /)) as Report)),
    /** ms until every stream of the group had its first change set again */
    reconnect: async () =>
      Math.max(...(await Promise.all(group.map(async (c) => Number(await ask(c, "reconnect", /^reconnected /, 1_200_000)))))),
    signal: (sig: NodeJS.Signals) => group.forEach((c) => c.p.kill(sig)),
  };
}

export async function netns(name: string) {
  await Bun.spawn(["ip", "netns", "add", name]).exited;
  await Bun.spawn(["ip", "-n", name, "link", "set", "lo", "up"]).exited;
}

/** bench/global-brain.ts: a Brain on a generated cluster, in a process of its own, driven by its stdin. */
async function generatedBrain(dir: string, procs: Proc[]): Promise<BenchBrain> {
  if (TLS) makeMutualTls(dir);
  const sock = join(dir, "brain.sock");
  const t0 = performance.now();
  const profile = process.env.GLOBAL_BENCH_PROFILE ? ["--cpu-prof-md", `--cpu-prof-dir=${process.env.GLOBAL_BENCH_PROFILE}`] : [];
  const brain = spawn([
    BUN,
    ...profile,
    join(ROOT, "bench/global-brain.ts"),
    sock,
    String(GEN.services),
    String(GEN.endpoints),
    String(GEN.nodes),
    ...(TLS ? [dir] : []),
  ]);
  procs.push(brain);
  const port = (await brain.wait(/^ready/)).split(" ")[1];
  console.log(`  generated brain (bench/global-brain.ts, ${GEN.nodes} nodes) up in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
  const ask = async (cmd: string, re: RegExp) => {
    const from = brain.out.length;
    brain.send(cmd);
    return (await brain.wait(re, from)).split(" ");
  };
  let k = 0;
  return {
    pid: brain.p.pid,
    target: TLS ? `tls:${port}:${dir}` : sock,
    wrap: [],
    sock,
    kpng: [BUN, join(ROOT, "src/main.ts")],
    full(ns) {
      const file = join(dir, "cluster.json");
      writeFileSync(file, JSON.stringify(genCluster(GEN)));
      return ["ip", "netns", "exec", ns, BUN, join(ROOT, "src/main.ts"), "--input", file, "--node-name", "node-1"];
    },
    async rss() {
      const [, rss, hwm, dropped, heap] = (await ask("rss", /^rss /)).map(Number);
      return { rss, hwm, dropped, heap };
    },
    lag: async () => Number((await ask("lag", /^lag /))[1]),
    async change() {
      const [, at, flushMs, cpu0] = (await ask(`change ${1234 + k++}`, /^changed /)).map(Number);
      return { at, flushMs, cpu0 };
    },
    async close() {
      // A brain that quits writes its profile (GLOBAL_BENCH_PROFILE).
      brain.send("quit");
      await Promise.race([brain.p.exited, Bun.sleep(10_000)]);
    },
  };
}

const heapText = (heap: number | undefined) => (heap === undefined ? "" : `; JS heap and its buffers ${mb(heap)}`);
const lagText = (lag: number | undefined) => (lag === undefined ? "" : `; event loop late by at most ${lag} ms`);

export default async function main() {
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-global-"));
  const suffix = randomBytes(3).toString("hex");
  const namespaces = [`kpngb-${suffix}-a1`, `kpngb-${suffix}-a2`, `kpngb-${suffix}-full`];
  const procs: Proc[] = [];
  let brain: BenchBrain | undefined;
  try {
    console.log(
      `\n${GEN.services} services x ${GEN.endpoints} endpoints; ${STREAMS - 2} light streams${TLS ? " (mutual TLS over loopback TCP)" : ""} + 2 nft agents (load average ${load()})`,
    );
    brain = REAL ? await realBrain({ dir, services: GEN.services }) : await generatedBrain(dir, procs);
    const b = brain;
    console.log(`  brain RSS with no stream ${mb((await b.rss()).rss)}`);

    const light = (n: number, wave: number, mode = "") => consumerGroup(n, wave, mode, b, procs);
    let t = performance.now();
    const first = light(10, 10);
    await first.connected();
    const at10 = await b.rss();
    console.log(
      `  10 streams: full model to each in ${(performance.now() - t).toFixed(0)} ms; brain RSS ${mb(at10.rss)}${heapText(at10.heap)}`,
    );

    for (const ns of namespaces) await netns(ns);
    const agents = [1, 2].map((k, i) => {
      const a = spawn([
        "ip",
        "netns",
        "exec",
        namespaces[i],
        ...b.kpng,
        "--api",
        `unix://${b.sock}`,
        "--node-name",
        `node-${k}`,
        "--backend",
        "nft",
        ...FREE_PORTS,
      ]);
      procs.push(a);
      return a;
    });
    t = performance.now();
    await Promise.all(agents.map((a) => a.wait(/synced backend=nft rev=1 /, 0, "err")));
    console.log(`  2 nft agents: first sync in the kernel ${(performance.now() - t).toFixed(0)} ms after start`);

    t = performance.now();
    await b.lag();
    const rest = light(STREAMS - 12, 50);
    await rest.connected();
    const lagAll = await b.lag(); // before `rss`, whose full collection stops the loop
    const all = await b.rss();
    const perStream = `${((all.rss - at10.rss) / (STREAMS - 10) / 1e3).toFixed(0)} KB a stream${all.heap === undefined || at10.heap === undefined ? "" : ` (${((all.heap - at10.heap) / (STREAMS - 10) / 1e3).toFixed(0)} KB of it JS heap)`}`;
    console.log(
      `  ${STREAMS} streams: the other ${STREAMS - 12} connected in ${rest.procs.length} processes, each in waves of 50, in ${((performance.now() - t) / 1000).toFixed(1)} s; brain RSS ${mb(all.rss)} (peak ${mb(all.hwm)}${heapText(all.heap)}); ${perStream}${lagText(lagAll)}`,
    );

    // One endpoint change, three times: to every stream, and to the agents' kernels.
    const consumers = [first, rest];
    const reports = async () => (await Promise.all(consumers.map((c) => c.report()))).flat();
    for (let round = 0; round < 3; round++) {
      const before = (await reports()).flatMap((r) => r.streams);
      const agentFrom = agents.map((a) => a.err.length);
      const { at, flushMs, cpu0 } = await b.change();
      const agentLines = await Promise.all(
        agents.map((a, i) => a.wait(/synced backend=nft rev=\d+ .*changed=1 /, agentFrom[i], "err", 30_000)),
      );
      // every stream has it, or the wait is over (those without it are counted as missed)
      const deadline = performance.now() + 10_000 + STREAMS;
      let after = (await reports()).flatMap((r) => r.streams);
      while (after.some(([n], i) => n <= before[i][0]) && performance.now() < deadline) {
        await Bun.sleep(200);
        after = (await reports()).flatMap((r) => r.streams);
      }
      await Bun.sleep(500); // the brain's CPU for the change: its last writes
      const cpu = treeCpuMs(b.pid) - cpu0;
      const lat: number[] = [];
      let missed = 0;
      after.forEach(([n, when], i) => (n > before[i][0] ? lat.push(when - at) : missed++));
      const agentMs = agentLines.map((l) => logTime(l) - at);
      const applyMs = agentLines.map((l) => Number(/ ms=(\d+)/.exec(l)![1]));
      // The full binary runs the same flush and the same nft apply in one process: what the agent adds is the rest.
      const extra =
        flushMs === undefined
          ? ""
          : `; over the full binary's flush + apply: ${agentMs.map((m, i) => `${(m - flushMs - applyMs[i]).toFixed(0)} ms`).join(", ")}`;
      console.log(
        `  change ${round + 1}: ${flushMs === undefined ? "" : `brain flush ${flushMs.toFixed(1)} ms, `}brain CPU ${cpu.toFixed(0)} ms in all; ${lat.length} light streams p50 ${pct(lat, 50).toFixed(0)} ms, p99 ${pct(lat, 99).toFixed(0)} ms, max ${Math.max(...lat).toFixed(0)} ms${missed ? `, ${missed} missed` : ""}; agents' kernels ${agentMs.map((m) => `${m.toFixed(0)} ms`).join(", ")} (nft apply ${applyMs.join(", ")} ms${extra}) (load ${load()})`,
      );
      await Bun.sleep(300);
    }

    // A brain failover: every light stream comes back at once and takes a whole model.
    if (FAILOVER) {
      resetPeak(b.pid);
      await b.lag();
      t = performance.now();
      const back = await Promise.all(consumers.map((c) => c.reconnect()));
      const lagBack = await b.lag();
      const rb = await b.rss();
      const failures = (await reports()).reduce((n, r) => n + r.failures, 0);
      console.log(
        `  all ${STREAMS - 2} light streams reconnecting at once (a failover): each had its whole model again within ${(Math.max(...back) / 1000).toFixed(1)} s; brain RSS ${mb(rb.rss)} (peak ${mb(rb.hwm)} while they came back)${lagText(lagBack)}; streams that broke and were opened again so far: ${failures}`,
      );
    }

    // Stuck consumers: the first 10 streams stop reading between change sets (SIGSTOP), then 3 changes.
    const healthy = (await b.rss()).rss;
    const stoppedAt = (await first.report()).flatMap((r) => r.streams).map(([n]) => n);
    first.signal("SIGSTOP");
    for (let round = 0; round < 3; round++) {
      await b.change();
      await Bun.sleep(1500);
    }
    const stuckIdle = (await b.rss()).rss;
    console.log(
      `  10 of ${STREAMS} streams stuck between change sets, 3 changes later: brain RSS ${mb(stuckIdle)} (${mb(stuckIdle - healthy)} over ${mb(healthy)} with all reading)`,
    );
    // 10 more that stop mid-model: the brain's writes to them wait, then it drops them.
    const stalled = light(10, 10, "stall");
    let t1 = performance.now();
    await Bun.sleep(5000);
    const mid = await b.rss();
    console.log(
      `  + 10 stuck mid-model, 5 s later: brain RSS ${mb(mid.rss)} (${mb(mid.rss - healthy)} over all reading); streams dropped so far ${mid.dropped}`,
    );
    await Bun.sleep(Math.max(0, 36_000 - (performance.now() - t1)));
    const dropped = await b.rss();
    console.log(`  36 s later: brain RSS ${mb(dropped.rss)}; streams dropped for not reading: ${dropped.dropped}`);
    first.signal("SIGCONT");
    stalled.signal("SIGCONT");
    // Nobody stays behind: the stopped streams catch up (the changes they missed in fewer change sets), the dropped ones come back with a whole model.
    t1 = performance.now();
    const behind = async () => {
      const caughtUp = (await first.report()).flatMap((r) => r.streams).filter(([n], i) => n > stoppedAt[i]).length;
      const back = (await stalled.report()).flatMap((r) => r.streams).filter(([n]) => n > 0).length;
      return { caughtUp, back };
    };
    let state = await behind();
    while ((state.caughtUp < 10 || state.back < 10) && performance.now() - t1 < 60_000) {
      await Bun.sleep(200);
      state = await behind();
    }
    const missedSets = (await first.report()).flatMap((r) => r.streams).map(([n], i) => n - stoppedAt[i]);
    console.log(
      `  resumed: ${state.caughtUp} of the 10 stopped between change sets caught up (${Math.min(...missedSets)}-${Math.max(...missedSets)} change sets for the 3 changes), ${state.back} of the 10 dropped mid-model had a whole model again, ${((performance.now() - t1) / 1000).toFixed(1)} s after SIGCONT; brain RSS ${mb((await b.rss()).rss)}`,
    );

    // Behind for good? One more change after all that: every stream, stuck before or not, must have it.
    const everyone = [first, rest, stalled];
    const streamsNow = async () => (await Promise.all(everyone.map((c) => c.report()))).flat().flatMap((r) => r.streams);
    const { at: lastAt } = await b.change();
    t1 = performance.now();
    let lagging = (await streamsNow()).filter(([, when]) => when < lastAt).length;
    while (lagging > 0 && performance.now() - t1 < 60_000) {
      await Bun.sleep(500);
      lagging = (await streamsNow()).filter(([, when]) => when < lastAt).length;
    }
    console.log(
      `  behind for good: ${lagging} of ${STREAMS - 2 + 10} light streams without the last change ${((performance.now() - t1) / 1000).toFixed(1)} s after it`,
    );

    // The same node with the full binary (its own brain, the same cluster) in a third namespace.
    t = performance.now();
    const full = spawn([...b.full(namespaces[2]), "--backend", "nft", ...FREE_PORTS]);
    procs.push(full);
    await full.wait(/synced backend=nft rev=1 /, 0, "err");
    console.log(`  full binary: first sync ${(performance.now() - t).toFixed(0)} ms after start`);
    await Bun.sleep(3000);
    console.log(
      `  RSS 3 s after first sync: agent ${mb(rssOf(agents[0].p.pid))}, ${mb(rssOf(agents[1].p.pid))}; full binary ${mb(rssOf(full.p.pid))}`,
    );
  } finally {
    await brain?.close();
    for (const p of procs) p.p.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.p.exited));
    for (const ns of namespaces) await Bun.spawn(["ip", "netns", "del", ns], { stderr: "ignore" }).exited;
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  await main();
  await closeApis();
}
