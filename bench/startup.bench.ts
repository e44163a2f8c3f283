// Start-up end to end, as a user runs it: `kpng --kubeconfig K --backend nft`
// inside a network namespace (test/harness/netns.ts), against the real
// kube-apiserver + etcd over HTTPS (KPNG_BENCH_API=fake: the in-repo API
// server in the same namespace instead; bench/bench-api.ts), at 1,000 and
// 10,000 services x 10 endpoints on 100 nodes (bench/startup-api-server.ts);
// KPNG_BENCH_SIZES=50000 for issue 40's five times the scale (the real API
// server is filled through etcd, bench/etcd-fill.ts, in about two minutes).
// KPNG_BENCH_KPNG measures another tree's kpng, or several in turn
// (bench/kpng-under-test.ts). Printed:
//
//   - process start -> rules in the kernel (the first `synced backend=nft`),
//     and whether a connect to the last service is then answered by its pod;
//   - the split per phase, from kpng's own log lines: boot (runtime, imports,
//     kubeconfig), list (a streamed list per kind, as client-go 1.36 lists:
//     decode and validation overlap it, their CPU time is shown inside, with
//     the API server's own time writing the answers), compute (the brain's
//     first state),
//     render and apply (nft);
//   - kpng's own CPU time from start to rules, by thread: the main thread,
//     JavaScriptCore's JIT workers (compiling on other threads, so beside
//     the main thread and the API server on a 2-core node), the rest;
//   - the API server's work meanwhile: kube-apiserver's, etcd's and the
//     relay's CPU time (real), the time spent writing list answers (fake);
//   - the CPU time the rest of the host used meanwhile (not kpng, its nft
//     runs or the API server): on a shared 2-core machine, what competed;
//   - RSS of kpng's whole process tree (nft children included) after 20
//     EndpointSlice changes, each applied before the next; kpng's own split
//     into anonymous memory and pages of its executable (RssFile).
//
// kpng is the compiled binary, built fresh as `bun run build` does (build.ts):
// what a user downloads and runs. KPNG_BENCH_SOURCE=1
// runs `bun src/main.ts` instead (module loading then costs more).
//
// The real API server is started and filled once per size; each run sets the
// changed slice back first. The in-repo one is started afresh for each run.
//
// Each run is a first start on a node: kpng's tables from the run before are
// deleted (a restart rewrites them in place, a longer apply), and
// the kernel gets a few seconds to free them. The API server has answered the
// same lists once before (`kpng --dry-run --once`), as a real one, long
// running and serving every node's proxy, has: a cold in-repo server spent its
// JIT warm-up inside kpng's list phase, on the same 2 cores, and a fresh
// kube-apiserver fills its watch cache on its first list.
//
// Each run waits (up to 2 min, KPNG_BENCH_NFT_WAIT_MS) until no process on
// the host listens to nftables events (nftListeners): one listener anywhere,
// say another kpng of a test suite, makes the load slower (docs/results/2026-11.md,
// the figures). A run that
// could not wait says so.
//
// kpng asks in kube-proxy's default content type, protobuf (the API server
// answers lists and watches in it); KPNG_BENCH_CONTENT_TYPE=json asks for
// JSON (`--kube-api-content-type application/json`), as before kpng read
// protobuf.
//
// Goals (issue 25): 10k <= 1.5 s; 1k <= 0.2 s.
//
// After each size (real API server), the lists timed by hand from the node
// (bench/list-probe.ts: kpng's requests, streamed and by pages, the time to
// the headers, the first and the last byte of each kind, nothing decoded):
// what of kpng's list phase is the API server's and the network's.
// KPNG_BENCH_LIST_PROBE=0 leaves them out.
//
// After each size, the floors (bench/floors.ts, issue 40): the last run's
// ruleset, as kpng left it in the node, loaded by hand into an empty
// namespace (nft: `nft -f` of `nft list ruleset`, and the same batches
// replayed on a netlink socket, the kernel's own floor; iptables: ipset,
// iptables and ip6tables restores of their saves, and one DNAT chain
// rewritten with --noflush). KPNG_BENCH_FLOORS=0 leaves them out.
// Figures only; nothing asserted. KPNG_BENCH_RUNS (default 3) runs per size;
// KPNG_BENCH_SIZES (default "1000,10000") the sizes; KPNG_BENCH_MODE=iptables
// runs `--backend iptables` instead of nft (the node's tables and ipsets are
// emptied before each run instead of kpng's nft tables deleted). Each run also
// prints the median of the 20 changes' latency: the bench's write of the
// change to the API server -> kpng's `synced` line (a change not synced
// within 10 s, KPNG_BENCH_CHANGE_TIMEOUT_MS, ends the run's changes: "never", as a kpng whose watch fails
// shows). KPNG_BENCH_LOG=FILE
// appends each run's kpng log (debug level) to FILE, every line prefixed with
// its offset from kpng's start (ms, when the bench read it): the timeline
// behind the phases. KPNG_BENCH_KPNG_ENV="A=1 B=2" sets variables for the
// measured kpng alone (BUN_JSC_* options, BUN_OPTIONS=--cpu-prof-md...).

import { appendFileSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { join } from "node:path";
import type { Topology } from "../test/harness/netns.ts";
import { apiKind, apiLabel, type BenchApi, inBenchNode, processCpuMs, runAlone, withApi } from "./bench-api.ts";
import { iptablesFloors, nftFloors } from "./floors.ts";
import { probeLists } from "./list-probe.ts";
import { deleteNftTables, kpngInNode, type KpngUnderTest, kpngsUnderTest } from "./kpng-under-test.ts";
import { lines } from "./lines.ts";
import { lastServiceIP, NODE_NAME } from "./startup-api-server.ts";

const ROOT = join(import.meta.dir, "..");
const MODE = process.env.KPNG_BENCH_MODE === "iptables" ? "iptables" : "nft";
/** variables for the measured kpng only, not the API server or the warm-up */
const kpngEnv = () =>
  Object.fromEntries(
    (process.env.KPNG_BENCH_KPNG_ENV ?? "")
      .split(/\s+/)
      .filter(Boolean)
      .map((kv) => kv.split("=", 2)),
  );
const CHANGES = 20;
/** a first sync not done by then is not coming: 50,000 services took 54-112 s on a loaded 2-core host */
export const FIRST_SYNC_TIMEOUT_MS = 600_000;
/** a change not synced by then is not coming (a kpng whose watch fails); KPNG_BENCH_CHANGE_TIMEOUT_MS: longer, for 50,000 services */
const CHANGE_TIMEOUT_MS = Number(process.env.KPNG_BENCH_CHANGE_TIMEOUT_MS ?? 10_000);

/** pid and every descendant, from /proc */
function processTree(root: number): number[] {
  const children = new Map<number, number[]>();
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(d)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    out.push(p);
    for (const c of children.get(p) ?? []) walk(c);
  };
  walk(root);
  return out;
}

/** VmRSS, RssAnon and RssFile (the executable's pages, shared with the page cache) in MB */
const rssMB = (pid: number) => {
  try {
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    const kb = (key: string) => Number(new RegExp(`${key}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) / 1024;
    return { rss: kb("VmRSS"), anon: kb("RssAnon"), file: kb("RssFile") };
  } catch {
    return { rss: 0, anon: 0, file: 0 };
  }
};
/**
 * Netlink sockets on the host that listen to nftables events
 * (NETLINK_NETFILTER joined to NFNLGRP_NFTABLES: another kpng's watch, an
 * `nft monitor`), in any network namespace: the kernel keeps one listener
 * mask per netlink protocol for all namespaces, so while one exists every nft
 * commit anywhere builds a notification per element. A big load then takes
 * longer (docs/results/2026-11.md), whichever namespace the listener is in.
 */
function nftListeners(): number {
  const seen = new Set<string>();
  let n = 0;
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const ns = readlinkSync(`/proc/${d}/ns/net`);
      if (seen.has(ns)) continue;
      seen.add(ns);
      for (const line of readFileSync(`/proc/${d}/net/netlink`, "utf8").split("\n").slice(1)) {
        const [, protocol, , groups] = line.trim().split(/\s+/);
        if (protocol === "12" && groups && Number.parseInt(groups, 16) & (1 << 6)) n++; // NFNLGRP_NFTABLES = 7
      }
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

/** Waits up to `ms` for a host without nftables listeners; returns how many are left. */
export async function quietNft(ms = 120_000): Promise<number> {
  const end = Date.now() + ms;
  let n = nftListeners();
  while (n > 0 && Date.now() < end) {
    await Bun.sleep(1000);
    n = nftListeners();
  }
  return n;
}

/** the program and its first argument: "kpng", "nft -i", "nft monitor" */
const comm = (pid: number) => {
  try {
    const [cmd, arg] = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    const name = cmd.slice(cmd.lastIndexOf("/") + 1);
    return name === "nft" && arg ? `${name} ${arg}` : name;
  } catch {
    return "?";
  }
};

const TICK_MS = 10; // USER_HZ is 100 on Linux
/** CPU time the whole host spent busy (all cores), from /proc/stat */
function hostBusyMs(): number {
  const [user, nice, system, , , irq, softirq, steal] = readFileSync("/proc/stat", "utf8")
    .split("\n")[0]
    .trim()
    .split(/\s+/)
    .slice(1)
    .map(Number);
  return (user + nice + system + irq + softirq + steal) * TICK_MS;
}
/**
 * CPU time of kpng's own threads (not its nft children), split into the
 * main thread, JavaScriptCore's JIT workers and the rest (GC helpers, Bun's
 * pool): the JIT compiles on other threads, which on a 2-core node compete
 * with the main thread and the API server.
 */
function kpngThreadsCpuMs(root: number): { main: number; jit: number; other: number } {
  const out = { main: 0, jit: 0, other: 0 };
  for (const pid of processTree(root)) {
    if (!["kpng", "bun"].includes(comm(pid))) continue; // the binary, or bun src/main.ts (KPNG_BENCH_SOURCE)
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      try {
        const stat = readFileSync(`/proc/${pid}/task/${tid}/stat`, "utf8");
        const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"));
        const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
        const ms = (Number(f[11]) + Number(f[12])) * TICK_MS;
        if (tid === String(pid)) out.main += ms;
        else if (name.startsWith("JITWorker")) out.jit += ms;
        else out.other += ms;
      } catch {
        // gone meanwhile
      }
    }
  }
  return out;
}

const field = (line: string, key: string) => Number(new RegExp(`\\b${key}[= ]([\\d.]+)`).exec(line)?.[1] ?? NaN);
const stamp = (line: string) => Date.parse(line.slice(0, line.indexOf(" ")));

interface Run {
  totalMs: number;
  connected: boolean;
  phases: Record<string, number>;
  decodeMs: number;
  validateMs: number;
  /** the API server's work from start to rules (BenchApi.serverMs) */
  serverMs: number;
  rss: number;
  rssParts: string;
  /** nftables event listeners elsewhere on the host at the start (nftListeners): the apply figure is inflated */
  listeners: number;
  /** median latency of the changes, API server -> synced; Infinity: a change never synced */
  changeMs: number;
  /** changes made (fewer than CHANGES when one never synced) */
  changes: number;
  /** CPU ms the rest of the host (not kpng, its nft runs or the API server) used from start to rules: what competed */
  othersMs: number;
  /** CPU ms of kpng's threads from start to rules: main thread, JIT workers, the rest */
  threads: { main: number; jit: number; other: number };
}

/** A first start in iptables mode: nothing of a previous run's rules or hairpin sets left in the node. */
function emptyIptables(ns: string) {
  for (const restore of ["iptables-restore", "ip6tables-restore"])
    Bun.spawnSync(["ip", "netns", "exec", ns, restore], {
      stdin: new TextEncoder().encode("*mangle\nCOMMIT\n*filter\nCOMMIT\n*nat\nCOMMIT\n"),
      stderr: "ignore",
    });
  Bun.spawnSync(["ip", "netns", "exec", ns, "ipset", "destroy"], { stderr: "ignore" });
}

/** KPNG_BENCH_LOG: a run's kpng log, each line with its offset from `t0` */
function saveLog(title: string, t0: number, all: ReadonlyArray<{ line: string; at: number }>) {
  const file = process.env.KPNG_BENCH_LOG;
  if (!file) return;
  appendFileSync(file, `== ${title}\n${all.map((l) => `+${String(l.at - t0).padStart(5)} ${l.line}\n`).join("")}`);
}

const cpuOf = (pids: number[]) => pids.reduce((n, p) => n + processCpuMs(p), 0);

async function once(opts: { topo: Topology; api: BenchApi; services: number; kpng: string[]; title: string }): Promise<Run> {
  const { topo, api, services, kpng: kpngArgv, title } = opts;
  const kubeconfig = await api.begin();
  try {
    if (MODE === "iptables") emptyIptables(topo.node.ns);
    else deleteNftTables(topo.node.ns, "kpng");
    const warm = Bun.spawnSync([...kpngInNode(topo.node.ns, kpngArgv, kubeconfig, MODE), "--dry-run", "--once"], {
      cwd: ROOT,
      stdout: "ignore",
      stderr: "pipe",
      env: { ...process.env, HOME: "/dev/null" },
    });
    if (warm.exitCode !== 0) throw new Error(`warm-up list failed: ${warm.stderr.toString()}`);
    await Bun.sleep(2000); // the deleted tables are freed by a kernel worker, after the commit
    const listeners = await quietNft(Number(process.env.KPNG_BENCH_NFT_WAIT_MS ?? 120_000));
    const server0 = await api.serverMs();
    const apiPids = api.pids();
    const t0 = Date.now();
    const busy0 = hostBusyMs();
    const api0 = cpuOf(apiPids);
    const kpng = Bun.spawn(kpngInNode(topo.node.ns, kpngArgv, kubeconfig, MODE), {
      cwd: ROOT,
      stdout: "ignore",
      stderr: "pipe",
      env: { ...process.env, ...kpngEnv(), KPNG_LOG_LEVEL: "debug", HOME: "/dev/null" },
    });
    const log = lines(kpng.stderr);
    try {
      const syncedRe = new RegExp(` synced backend=${MODE} `);
      const synced = await log.wait(syncedRe, 1, FIRST_SYNC_TIMEOUT_MS);
      const totalMs = synced.at - t0;
      // `ip netns exec` runs kpng as its child: the tree's CPU is the netns exec's own plus its reaped children
      const threads = kpngThreadsCpuMs(kpng.pid);
      const othersMs = hostBusyMs() - busy0 - cpuOf(processTree(kpng.pid)) - (cpuOf(apiPids) - api0);
      const serverMs = (await api.serverMs()) - server0;
      const probe = await topo.probe(topo.client.ns, { ip: lastServiceIP(services), port: 80 });
      const watching = stamp((await log.wait(/watching the API server/)).line);
      const listed = log.all.filter((l) => / listed kind=/.test(l.line)).map((l) => l.line);
      const computed = stamp((await log.wait(/node-local state computed/)).line);
      const nft = (await log.wait(new RegExp(`DEBUG kpng/${MODE}: synced full=true`))).line;
      const lastListed = Math.max(...listed.map(stamp));
      const phases = {
        boot: watching - t0,
        list: lastListed - watching,
        compute: computed - lastListed,
        render: field(nft, "renderMs"),
        apply: field(nft, "applyMs"),
      };
      const sum = (k: string) => listed.reduce((n, l) => n + field(l, k), 0);

      const changeMs: number[] = [];
      for (let n = 1; n <= CHANGES; n++) {
        await Bun.sleep(500); // each change alone, not behind the pause that follows the previous sync (src/core/pacing.ts)
        const sent = Date.now();
        await api.change(n);
        const seen = await log.wait(syncedRe, n + 1, CHANGE_TIMEOUT_MS).catch(() => undefined);
        changeMs.push(seen ? seen.at - sent : Number.POSITIVE_INFINITY);
        if (!seen) break;
      }
      await Bun.sleep(500);
      const tree = processTree(kpng.pid);
      const parts = tree.map((p) => ({ name: comm(p), ...rssMB(p) }));
      return {
        totalMs,
        connected: probe.ok,
        phases,
        decodeMs: sum("decodeMs"),
        validateMs: sum("validateMs"),
        serverMs,
        rss: parts.reduce((n, p) => n + p.rss, 0),
        listeners,
        changeMs: median(changeMs),
        changes: changeMs.length,
        othersMs,
        threads,
        rssParts: parts
          .map((p) => `${p.name} ${p.rss.toFixed(0)}${p.name === "kpng" ? ` = anon ${p.anon.toFixed(0)} + file ${p.file.toFixed(0)}` : ""}`)
          .join(" + "),
      };
    } finally {
      kpng.kill("SIGTERM");
      await kpng.exited;
      saveLog(title, t0, log.all);
    }
  } finally {
    await api.end();
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const f0 = (x: number) => x.toFixed(0).padStart(5);
const load = () => readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ");
const changeText = (x: Run) =>
  x.changeMs === Number.POSITIVE_INFINITY
    ? `change ${x.changes === 1 ? "never synced" : `median never (${x.changes} changes, the last never synced)`} (${CHANGE_TIMEOUT_MS / 1000} s)`
    : `change ${x.changeMs} ms`;

export default async function startupBench() {
  const runs = Number(process.env.KPNG_BENCH_RUNS ?? 3);
  const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
  const kind = apiKind();
  const contentType = process.env.KPNG_BENCH_CONTENT_TYPE === "json" ? "application/json" : "application/vnd.kubernetes.protobuf";
  await inBenchNode({ prefix: "kps", dirPrefix: "kpng-bench-startup-" }, async (topo, dir) => {
    const kpngs: KpngUnderTest[] = await kpngsUnderTest(dir);
    console.log(
      `kpng: ${kpngs.map((k) => k.name).join(", ")} (${process.env.KPNG_BENCH_SOURCE ? "bun src/main.ts" : "compiled binary, as bun run build"}), asking the API server for ${contentType}; against ${apiLabel(kind)}`,
    );
    await topo.serve(topo.pods[0], { tcp: [8080] });
    for (const services of sizes) {
      console.log(`\n${services} services x 10 endpoints, 100 nodes; kpng --kubeconfig --backend ${MODE} in a namespace (load ${load()})`);
      await withApi({ kind, topo, services, dir }, async (api) => {
        const width = Math.max(4, ...kpngs.map((k) => k.name.length));
        console.log(
          `  run ${"kpng".padEnd(width)} | start->rules ms | boot  list compute render apply (ms) | decode validate (CPU ms, inside list) server (${kind === "real" ? "apiserver+etcd+relay CPU ms" : "list answers ms"}) | kpng main jit other | others (CPU ms) | connect | RSS MB after the changes | change latency | load`,
        );
        const all = new Map<KpngUnderTest, Run[]>(kpngs.map((k) => [k, []]));
        for (let r = 1; r <= runs; r++)
          for (const k of kpngs) {
            const before = load();
            const x = await once({
              topo,
              api,
              services,
              kpng: [...k.argv, "--kube-api-content-type", contentType],
              title: `${services} services, ${k.name}, run ${r} (load ${before})`,
            });
            all.get(k)!.push(x);
            const p = x.phases;
            console.log(
              `  ${String(r).padStart(3)} ${k.name.padEnd(width)} | ${f0(x.totalMs).padStart(15)} | ${f0(p.boot)} ${f0(p.list)} ${f0(p.compute).padStart(7)} ${f0(p.render).padStart(6)} ${f0(p.apply)} | ${f0(x.decodeMs)} ${f0(x.validateMs).padStart(8)} ${f0(x.serverMs).padStart(6)} | ${f0(x.threads.main).padStart(9)} ${f0(x.threads.jit).padStart(3)} ${f0(x.threads.other).padStart(5)} | ${f0(x.othersMs).padStart(15)} | ${x.connected ? "yes" : "NO "} | ${x.rss.toFixed(0)} (${x.rssParts}) | ${changeText(x)} | ${before}${x.listeners ? ` | ${x.listeners} nftables listeners elsewhere on the host: apply inflated` : ""}`,
            );
          }
        for (const [k, xs] of all) {
          const tot = xs.map((x) => x.totalMs);
          const rss = xs.map((x) => x.rss);
          const ch = xs.map((x) => x.changeMs);
          const own = xs.map((x) => x.phases.render + x.phases.apply);
          console.log(
            `  ${k.name}: start->rules best ${Math.min(...tot).toFixed(0)} ms, median ${median(tot).toFixed(0)} ms (its own render+apply median ${median(own).toFixed(0)} ms); change latency median of runs ${median(ch) === Number.POSITIVE_INFINITY ? "never" : `${median(ch).toFixed(0)} ms`}; RSS best ${Math.min(...rss).toFixed(0)} MB, median ${median(rss).toFixed(0)} MB`,
          );
        }
        if (kind === "real" && process.env.KPNG_BENCH_LIST_PROBE !== "0") {
          // the API server's side of the list phase: the same requests as kpng, timed from the node, nothing decoded
          const kubeconfig = await api.begin();
          for (const line of await probeLists({ ns: topo.node.ns, kubeconfig, node: NODE_NAME, rounds: runs })) console.log(line);
          // the same from the API server's own namespace, where 127.0.0.1:6443 is kube-apiserver itself: without the
          // byte relay between the namespaces (test/harness/ns_forward.py), which forwards each of the server's writes
          if (api.ns)
            for (const line of await probeLists({
              ns: api.ns,
              kubeconfig,
              node: NODE_NAME,
              rounds: runs,
              where: " (in the API server's namespace, no relay)",
            }))
              console.log(line);
          await api.end();
        }
        // the last run's rules are still in the node (kpng leaves them as it stops, as kube-proxy does)
        if (process.env.KPNG_BENCH_FLOORS !== "0") {
          const quiet = () => quietNft(Number(process.env.KPNG_BENCH_NFT_WAIT_MS ?? 120_000));
          for (const line of await (MODE === "nft" ? nftFloors(topo.node.ns, quiet) : iptablesFloors(topo.node.ns, quiet)))
            console.log(line);
        }
      });
    }
  });
}

if (import.meta.main) await runAlone(startupBench);
