// kpng as it is deployed: the real process (`bun src/main.ts`, or the
// compiled dist/kpng) started with the flags an operator passes and nothing
// more, inside a node network namespace (test/harness/netns.ts) with the
// kernel's real nftables/iptables, fed by one of the two sources:
//
// - "file": `--input cluster.json`, edited in place as an operator would;
// - "api":  `--kubeconfig`, the in-repo API server (test/harness/api-server.ts)
//   over HTTPS with a certificate made for the test. The server runs in the
//   test process; ns_forward.py makes it reachable as https://127.0.0.1:6443
//   from inside the node namespace, where kpng runs.

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { createTopology, pythonPath, saidReady, startProbeLoop, type Probe, type ProbeRun, type Topology } from "../harness/netns.ts";

export type { ProbeRun };
import { FakeApiServer, makeTestCert } from "../harness/api-server.ts";
import { asList, clusterObjects, deniedClient, fillerObjects, NODE, podPorts, type K8sObject } from "./cluster.ts";

export type SourceKind = "file" | "api";
export type BackendName = "nft" | "iptables";

const harness = join(import.meta.dir, "../harness");
/** where the API server answers inside the node namespace */
const API_PORT = 6443;

const keyOf = (o: K8sObject) => `${o.kind}/${o.metadata.namespace ?? ""}/${o.metadata.name}`;

export interface Deployed {
  readonly topo: Topology;
  readonly source: SourceKind;
  readonly backend: BackendName;
  /** the API server (source "api") */
  readonly api?: FakeApiServer;
  /** the cluster file (source "file") */
  readonly input?: string;
  /** the flags kpng runs with */
  readonly args: string[];
  /** the running kpng */
  readonly kpng: KpngProcess;
  /** starts kpng (again), resolves after its first sync; `bin` = the compiled binary */
  start(opts?: { bin?: string }): Promise<KpngProcess>;
  /** changes or adds objects, as `kubectl apply` or an edit of the file does */
  apply(...objs: K8sObject[]): void;
  /** deletes an object */
  remove(kind: K8sObject["kind"], namespace: string | undefined, name: string): void;
  /** "synced" log lines of the running kpng so far */
  syncs(): number;
  /** resolves when the running kpng logged more than `n` syncs */
  syncedAfter(n: number, timeoutMs?: number): Promise<void>;
  /** kpng's rules as the kernel holds them, without counters (nft list ruleset / iptables-save) */
  rules(): Promise<string>;
  destroy(): Promise<void>;
}

/** `filler`: that many more services (cluster.ts fillerObjects) */
export async function deploy(opts: {
  source: SourceKind;
  backend: BackendName;
  bin?: string;
  prefix?: string;
  filler?: number;
}): Promise<Deployed> {
  const topo = await createTopology({ pods: 3, prefix: opts.prefix ?? "kpd" });
  const dir = tempDir("kpng-deployed-");
  dir.create();
  const cleanups: Array<() => unknown> = [() => topo.destroy(), () => dir.remove()];
  try {
    for (const p of topo.pods) await topo.serve(p, podPorts);
    await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
    const objects = new Map([...clusterObjects(topo), ...fillerObjects(opts.filler ?? 0)].map((o) => [keyOf(o), o]));
    const input = join(dir.path, "cluster.json");
    const writeFile = () => writeFileSync(input, JSON.stringify(asList(objects.values()), null, 1));
    let api: FakeApiServer | undefined;
    let args: string[];
    if (opts.source === "file") {
      writeFile();
      args = ["--input", input];
    } else {
      api = await FakeApiServer.start(makeTestCert(dir.path));
      cleanups.unshift(() => api!.close());
      for (const o of objects.values()) api.apply(o);
      cleanups.unshift(await forward(topo.node.ns, API_PORT, api.port));
      args = ["--kubeconfig", api.writeKubeconfig(dir.path, "kubeconfig", `https://127.0.0.1:${API_PORT}`)];
    }
    args.push("--node-name", NODE, "--backend", opts.backend);

    let kpng: KpngProcess | undefined;
    const d: Deployed = {
      topo,
      source: opts.source,
      backend: opts.backend,
      api,
      input: opts.source === "file" ? input : undefined,
      args,
      get kpng() {
        return kpng!;
      },
      async start(o = {}) {
        const p = startKpng(args, { bin: o.bin, wrap: ["ip", "netns", "exec", topo.node.ns] });
        kpng = p;
        await p.waitFor(/ INFO kpng: synced /, 20_000);
        return p;
      },
      apply(...objs) {
        for (const o of objs) objects.set(keyOf(o), o);
        if (api) for (const o of objs) api.apply(o);
        else writeFile();
      },
      remove(kind, namespace, name) {
        objects.delete(`${kind}/${namespace ?? ""}/${name}`);
        if (api) api.remove(kind, namespace, name);
        else writeFile();
      },
      syncs: () => kpng!.stderr.filter((l) => / INFO kpng: synced /.test(l)).length,
      async syncedAfter(n, timeoutMs = 10_000) {
        const end = Date.now() + timeoutMs;
        while (d.syncs() <= n) {
          if (Date.now() > end) throw new Error(`no sync after #${n} within ${timeoutMs} ms\n${kpng!.stderr.slice(-15).join("\n")}`);
          await Bun.sleep(20);
        }
      },
      rules: () => rulesOf(topo, opts.backend),
      async destroy() {
        await kpng?.stop("SIGKILL");
        for (const c of cleanups) await c();
      },
    };
    await d.start({ bin: opts.bin });
    return d;
  } catch (err) {
    for (const c of cleanups) await c();
    throw err;
  }
}

/** Starts ns_forward.py: 127.0.0.1:port inside `ns` -> 127.0.0.1:target here. Returns its stop. */
export async function forward(ns: string, port: number, target: number): Promise<() => Promise<void>> {
  const p = Bun.spawn([await pythonPath(), "-u", "-S", join(harness, "ns_forward.py"), ns, String(port), "127.0.0.1", String(target)], {
    stdout: "pipe",
    stderr: "inherit",
  });
  if (!(await saidReady(p.stdout))) throw new Error(`ns_forward.py into ${ns} did not start`);
  return async () => {
    p.kill();
    await p.exited;
  };
}

/** The rules kpng owns, as text to compare: no counters, no timestamps. */
export async function rulesOf(topo: Topology, backend: BackendName): Promise<string> {
  if (backend === "nft") return topo.exec(topo.node.ns, ["nft", "-s", "list", "ruleset"]);
  const save = await Promise.all(["iptables-save", "ip6tables-save"].map((c) => topo.exec(topo.node.ns, [c])));
  return save
    .join("")
    .split("\n")
    .filter((l) => !l.startsWith("#"))
    .map((l) => l.replace(/ \[\d+:\d+\]$/, ""))
    .join("\n");
}

/**
 * A probe running continuously from the client (probe_loop.py), round after
 * round over `probes`, resolved once its first round is done; `stop()` ends
 * it and tells how many connections it made and which failed.
 */
export async function continuousProbe(topo: Topology, probes: Probe[], pauseMs = 20): Promise<{ stop(): Promise<ProbeRun> }> {
  return startProbeLoop((argv) => ["ip", "netns", "exec", topo.client.ns, ...argv], probes, pauseMs);
}

/**
 * `nft monitor` in the node namespace: the kernel's ruleset changes, each
 * transaction closed by a "# new generation N by process P (cmd)" line.
 * `stop()` returns the transactions, each a list of change lines.
 */
export async function monitorRuleset(topo: Topology): Promise<{ stop(): Promise<string[][]> }> {
  const p = Bun.spawn(["ip", "netns", "exec", topo.node.ns, "nft", "monitor"], {
    stdout: "pipe",
    stderr: "pipe",
    env: { ...process.env, HOME: "/dev/null" },
  });
  const out = new Response(p.stdout).text();
  await Bun.sleep(150); // subscribed before anything happens (nothing prints a "listening")
  return {
    async stop() {
      await Bun.sleep(100); // the last events reach the monitor
      p.kill();
      await p.exited;
      const txs: string[][] = [[]];
      for (const line of (await out).split("\n")) {
        if (line.startsWith("# new generation")) txs.push([]);
        else if (line.trim()) txs.at(-1)!.push(line);
      }
      return txs.filter((t) => t.length);
    },
  };
}

/** kpng's tables ("ip kpng", "ip6 kpng") missing after some transaction, as a list of "after transaction i: ip kpng" */
export function tablesMissingBetweenTransactions(txs: string[][], tables = ["ip kpng", "ip6 kpng"]): string[] {
  const present = new Set(tables);
  const gaps: string[] = [];
  txs.forEach((tx, i) => {
    for (const line of tx) {
      for (const t of tables) {
        if (line === `delete table ${t}`) present.delete(t);
        if (line.startsWith(`add table ${t}`)) present.add(t);
      }
    }
    for (const t of tables) if (!present.has(t)) gaps.push(`after transaction ${i}: ${t}`);
  });
  return gaps;
}
