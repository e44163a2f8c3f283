// One brain for many nodes: a central brain (its own process) holding a
// 10,000-service x 10-endpoint cluster of 1,000 nodes serves the globalv1
// stream to N-2 light consumers (bench/global-consumers.ts: one HTTP/2
// connection each, spread over processes of at most 1,000 streams; they
// frame-walk and decode nothing) plus 2 real node agents (`kpng --api`, nft
// backend, each in its own network namespace). Prints: brain RSS at 10 and
// at N streams and what a stream costs (RSS, JS heap); one endpoint change to
// every stream (p50/p99/max, the brain's CPU time for it) and to the agents'
// kernels; a failover (every light stream reconnecting at once: how long
// until all have their model again, the brain's peak RSS meanwhile, how late
// its event loop ran: agents drop a brain that answers no ping for 3 s);
// agent RSS against the full binary's (`kpng --input`, same node, same
// backend). The light streams use loopback TCP with mutual TLS, as deployed
// agents do (GLOBAL_BENCH_TLS=0: the unix socket); the 2 agents stay on the
// unix socket, which reaches into their network namespaces. Then stuck
// consumers: 10 streams that stop reading between change sets, and 10 that
// stop mid-model (dropped after the brain's 30 s limit, then back): the
// brain's RSS with them against without. Needs root (nft in namespaces).
// `bun run bench global`; GLOBAL_BENCH_STREAMS=N (default 1,000; 5,000 is
// Kubernetes' largest cluster), GLOBAL_BENCH_PER_PROCESS, and
// GLOBAL_BENCH_PROFILE=DIR for a CPU profile of the brain.

import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { genCluster } from "../test/api/gen-cluster.ts";
import { FREE_PORTS } from "../test/harness/kpng-process.ts";
import { makeMutualTls } from "../test/harness/tls-flags.ts";

const ROOT = resolve(import.meta.dir, "..");
const BUN = join(ROOT, "node_modules/.bin/bun");
const GEN = { services: 10_000, endpoints: 10, nodes: 1_000 };
const STREAMS = Number(process.env.GLOBAL_BENCH_STREAMS ?? 1000);
const TLS = process.env.GLOBAL_BENCH_TLS !== "0";
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
/** user + system CPU time of a process, ms */
const cpuMs = (pid: number) => {
  const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1].split(" ");
  return (Number(f[11]) + Number(f[12])) * 10; // utime, stime in USER_HZ (100)
};
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
function consumerGroup(n: number, wave: number, mode: string, target: string, procs: Proc[]) {
  const group: Proc[] = [];
  for (let left = n; left > 0; left -= PER_PROCESS) {
    const c = spawn([BUN, join(ROOT, "bench/global-consumers.ts"), target, String(Math.min(PER_PROCESS, left)), String(wave), mode]);
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
    connected: () => Promise.all(group.map((c) => c.wait(/^connected/))),
    report: () => Promise.all(group.map(async (c) => JSON.parse(await ask(c, "report", /^report /)) as Report)),
    /** ms until every stream of the group had its first change set again */
    reconnect: async () =>
      Math.max(...(await Promise.all(group.map(async (c) => Number(await ask(c, "reconnect", /^reconnected /, 1_200_000)))))),
    signal: (sig: NodeJS.Signals) => group.forEach((c) => c.p.kill(sig)),
  };
}

async function brainLag(brain: Proc): Promise<number> {
  const from = brain.out.length;
  brain.send("lag");
  return Number((await brain.wait(/^lag /, from)).split(" ")[1]);
}

async function brainRss(brain: Proc): Promise<[number, number, number, number]> {
  const from = brain.out.length;
  brain.send("rss");
  const [, rss, hwm, dropped, heap] = (await brain.wait(/^rss /, from)).split(" ");
  return [Number(rss), Number(hwm), Number(dropped), Number(heap)];
}

export async function netns(name: string) {
  await Bun.spawn(["ip", "netns", "add", name]).exited;
  await Bun.spawn(["ip", "-n", name, "link", "set", "lo", "up"]).exited;
}

export default async function main() {
  console.log(
    `\n${GEN.services} services x ${GEN.endpoints} endpoints, ${GEN.nodes} nodes; ${STREAMS - 2} light streams${TLS ? " (mutual TLS over loopback TCP)" : ""} + 2 nft agents (load average ${load()})`,
  );
  const dir = mkdtempSync(join(tmpdir(), "kpng-bench-global-"));
  if (TLS) makeMutualTls(dir);
  const sock = join(dir, "brain.sock");
  const suffix = randomBytes(3).toString("hex");
  const namespaces = [`kpngb-${suffix}-a1`, `kpngb-${suffix}-a2`, `kpngb-${suffix}-full`];
  const procs: Proc[] = [];
  let brain: Proc | undefined;
  try {
    const t0 = performance.now();
    const profile = process.env.GLOBAL_BENCH_PROFILE ? ["--cpu-prof-md", `--cpu-prof-dir=${process.env.GLOBAL_BENCH_PROFILE}`] : [];
    brain = spawn([
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
    const target = TLS ? `tls:${port}:${dir}` : sock;
    console.log(`  brain up in ${((performance.now() - t0) / 1000).toFixed(1)} s; RSS with no stream ${mb((await brainRss(brain))[0])}`);

    const light = (n: number, wave: number, mode = "") => consumerGroup(n, wave, mode, target, procs);
    let t = performance.now();
    const first = light(10, 10);
    await first.connected();
    const [rss10, , , heap10] = await brainRss(brain);
    console.log(
      `  10 streams: full model to each in ${(performance.now() - t).toFixed(0)} ms; brain RSS ${mb(rss10)} (JS heap and its buffers ${mb(heap10)})`,
    );

    for (const ns of namespaces) await netns(ns);
    const agents = [1, 2].map((k, i) => {
      const a = spawn([
        "ip",
        "netns",
        "exec",
        namespaces[i],
        BUN,
        join(ROOT, "src/main.ts"),
        "--api",
        `unix://${sock}`,
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
    await brainLag(brain);
    const rest = light(STREAMS - 12, 50);
    await rest.connected();
    const lagAll = await brainLag(brain); // before `rss`, whose full collection stops the loop
    const [rssAll, hwm, , heapAll] = await brainRss(brain);
    console.log(
      `  ${STREAMS} streams: the other ${STREAMS - 12} connected in ${rest.procs.length} processes, each in waves of 50, in ${((performance.now() - t) / 1000).toFixed(1)} s; brain RSS ${mb(rssAll)} (peak ${mb(hwm)}; JS heap and its buffers ${mb(heapAll)}); ${((rssAll - rss10) / (STREAMS - 10) / 1e3).toFixed(0)} KB a stream (${((heapAll - heap10) / (STREAMS - 10) / 1e3).toFixed(0)} KB of it JS heap); event loop late by at most ${lagAll} ms`,
    );

    // One endpoint change, three times: to every stream, and to the agents' kernels.
    const consumers = [first, rest];
    const reports = async () => (await Promise.all(consumers.map((c) => c.report()))).flat();
    for (let round = 0; round < 3; round++) {
      const before = (await reports()).flatMap((r) => r.streams);
      const agentFrom = agents.map((a) => a.err.length);
      const from = brain.out.length;
      brain.send(`change ${1234 + round}`);
      const [, at, flushMs, cpu0] = (await brain.wait(/^changed /, from)).split(" ");
      const t0c = Number(at);
      const agentLines = await Promise.all(
        agents.map((a, i) => a.wait(/synced backend=nft rev=\d+ .*changed=1 /, agentFrom[i], "err", 10_000)),
      );
      await Bun.sleep(1500 + STREAMS / 5);
      const cpu = cpuMs(brain.p.pid) - Number(cpu0);
      const after = (await reports()).flatMap((r) => r.streams);
      const lat: number[] = [];
      let missed = 0;
      after.forEach(([n, when], i) => (n > before[i][0] ? lat.push(when - t0c) : missed++));
      const agentMs = agentLines.map((l) => logTime(l) - t0c);
      const applyMs = agentLines.map((l) => Number(/ ms=(\d+)/.exec(l)![1]));
      // The full binary runs the same flush and the same nft apply in one process: what the agent adds is the rest.
      const extra = agentMs.map((m, i) => m - Number(flushMs) - applyMs[i]);
      console.log(
        `  change ${round + 1}: brain flush ${Number(flushMs).toFixed(1)} ms, brain CPU ${cpu.toFixed(0)} ms in all; ${lat.length} light streams p50 ${pct(lat, 50).toFixed(0)} ms, p99 ${pct(lat, 99).toFixed(0)} ms, max ${Math.max(...lat).toFixed(0)} ms${missed ? `, ${missed} missed` : ""}; agents' kernels ${agentMs.map((m) => `${m.toFixed(0)} ms`).join(", ")} (nft apply ${applyMs.join(", ")} ms; over the full binary's flush + apply: ${extra.map((e) => `${e.toFixed(0)} ms`).join(", ")}) (load ${load()})`,
      );
      await Bun.sleep(300);
    }

    // A brain failover: every light stream comes back at once and takes a whole model.
    resetPeak(brain.p.pid);
    await brainLag(brain);
    t = performance.now();
    const back = await Promise.all(consumers.map((c) => c.reconnect()));
    const lagBack = await brainLag(brain);
    const [rssBack, hwmBack] = await brainRss(brain);
    const failures = (await reports()).reduce((n, r) => n + r.failures, 0);
    console.log(
      `  all ${STREAMS - 2} light streams reconnecting at once (a failover): each had its whole model again within ${(Math.max(...back) / 1000).toFixed(1)} s; brain RSS ${mb(rssBack)} (peak ${mb(hwmBack)} while they came back); event loop late by at most ${lagBack} ms; streams that broke and were opened again so far: ${failures}`,
    );

    // Stuck consumers: the first 10 streams stop reading between change sets (SIGSTOP), then 3 changes.
    const [healthy] = await brainRss(brain);
    const stoppedAt = (await first.report()).flatMap((r) => r.streams).map(([n]) => n);
    first.signal("SIGSTOP");
    for (let round = 0; round < 3; round++) {
      const from = brain.out.length;
      brain.send(`change ${2234 + round}`);
      await brain.wait(/^changed /, from);
      await Bun.sleep(1500);
    }
    const [stuckIdle] = await brainRss(brain);
    console.log(
      `  10 of ${STREAMS} streams stuck between change sets, 3 changes later: brain RSS ${mb(stuckIdle)} (${mb(stuckIdle - healthy)} over ${mb(healthy)} with all reading)`,
    );
    // 10 more that stop mid-model: the brain's writes to them wait, then it drops them.
    const stalled = light(10, 10, "stall");
    let t1 = performance.now();
    await Bun.sleep(5000);
    const [stuckMid, , dropped0] = await brainRss(brain);
    console.log(
      `  + 10 stuck mid-model, 5 s later: brain RSS ${mb(stuckMid)} (${mb(stuckMid - healthy)} over all reading); streams dropped so far ${dropped0}`,
    );
    await Bun.sleep(Math.max(0, 36_000 - (performance.now() - t1)));
    const [afterDrop, , dropped] = await brainRss(brain);
    console.log(`  36 s later: brain RSS ${mb(afterDrop)}; streams dropped for not reading: ${dropped}`);
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
      `  resumed: ${state.caughtUp} of the 10 stopped between change sets caught up (${Math.min(...missedSets)}-${Math.max(...missedSets)} change sets for the 3 changes), ${state.back} of the 10 dropped mid-model had a whole model again, ${((performance.now() - t1) / 1000).toFixed(1)} s after SIGCONT; brain RSS ${mb((await brainRss(brain))[0])}`,
    );

    // The same node with the full binary (its own brain, the file source) in a third namespace.
    const file = join(dir, "cluster.json");
    const cluster = genCluster(GEN);
    writeFileSync(file, JSON.stringify(cluster));
    t = performance.now();
    const full = spawn([
      "ip",
      "netns",
      "exec",
      namespaces[2],
      BUN,
      join(ROOT, "src/main.ts"),
      "--input",
      file,
      "--node-name",
      "node-1",
      "--backend",
      "nft",
      ...FREE_PORTS,
    ]);
    procs.push(full);
    await full.wait(/synced backend=nft rev=1 /, 0, "err");
    console.log(`  full binary (--input): first sync ${(performance.now() - t).toFixed(0)} ms after start`);
    await Bun.sleep(3000);
    console.log(
      `  RSS 3 s after first sync: agent ${mb(rssOf(agents[0].p.pid))}, ${mb(rssOf(agents[1].p.pid))}; full binary ${mb(rssOf(full.p.pid))}`,
    );
  } finally {
    // A brain that quits writes its profile (GLOBAL_BENCH_PROFILE).
    brain?.send("quit");
    await Promise.race([brain?.p.exited, Bun.sleep(10_000)]);
    for (const p of procs) p.p.kill("SIGKILL");
    await Promise.all(procs.map((p) => p.p.exited));
    for (const ns of namespaces) await Bun.spawn(["ip", "netns", "del", ns], { stderr: "ignore" }).exited;
    rmSync(dir, { recursive: true, force: true });
  }
}
