// kpng as it is deployed: the real process (`bun src/main.ts`, or the
// compiled dist/kpng) started with the flags an operator passes and nothing
// more, inside a node network namespace (test/harness/netns.ts) with the
// kernel's real nftables/iptables, fed by one of the two sources:
//
// - "file": `--input cluster.json`, edited in place as an operator would;
// - "api":  `--kubeconfig`, the real kube-apiserver + etcd
//   (test/harness/kube-apiserver.ts) as user system:kube-proxy, reached as
//   https://127.0.0.1:6443 from inside the node namespace, where kpng runs.
//   Objects are written with kubectl. The test process's shared control plane
//   serves it, or one of the deployment's own (`privateApi`) where a suite stops
//   the API server. `fakeApi`: the in-repo imitation
//   (test/harness/api-server.ts) instead, for what the real one cannot be made
//   to do on cue (a 500 answer, a compacted history, cut watches).

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { LOADED_WAIT_MS, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { createTopology, pythonPath, run, saidReady, startProbeLoop, type Probe, type ProbeRun, type Topology } from "../harness/netns.ts";

export type { ProbeRun };
import { FakeApiServer, makeTestCert } from "../harness/api-server.ts";
import { apiForNode, KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";
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
  /** the real API server (source "api") */
  readonly api?: KubeApiServer;
  /** the in-repo imitation instead (source "api", `fakeApi`) */
  readonly fake?: FakeApiServer;
  /** the cluster file (source "file") */
  readonly input?: string;
  /** the flags kpng runs with */
  readonly args: string[];
  /** the running kpng */
  readonly kpng: KpngProcess;
  /** starts kpng (again), resolves after its first sync; `bin` = the compiled binary */
  start(opts?: { bin?: string }): Promise<KpngProcess>;
  /** changes or adds objects, as `kubectl apply` or an edit of the file does */
  apply(...objs: K8sObject[]): Promise<void>;
  /** deletes an object */
  remove(kind: K8sObject["kind"], namespace: string | undefined, name: string): Promise<void>;
  /** "synced" log lines of the running kpng so far */
  syncs(): number;
  /** resolves when the running kpng logged more than `n` syncs */
  syncedAfter(n: number, timeoutMs?: number): Promise<void>;
  /** kpng's rules as the kernel holds them, without counters (nft list ruleset / iptables-save) */
  rules(): Promise<string>;
  destroy(): Promise<void>;
}

/**
 * `filler`: that many more services (cluster.ts fillerObjects); `privateApi`:
 * a control plane of this deployment's own (a suite that stops it); `fakeApi`:
 * the in-repo imitation of the API server instead of the real one.
 */
export async function deploy(opts: {
  source: SourceKind;
  backend: BackendName;
  bin?: string;
  prefix?: string;
  filler?: number;
  privateApi?: boolean;
  fakeApi?: boolean;
}): Promise<Deployed> {
  const topo = await createTopology({ pods: 3, prefix: opts.prefix ?? "kpd" });
  const dir = tempDir("kpng-deployed-");
  dir.create();
  const cleanups: Array<() => unknown> = [() => topo.destroy(), () => dir.remove()];
  try {
    for (const p of topo.pods) await topo.serve(p, podPorts);
    await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
    const cluster = clusterObjects(topo);
    const filler = fillerObjects(opts.filler ?? 0);
    const objects = new Map([...cluster, ...filler].map((o) => [keyOf(o), o]));
    const input = join(dir.path, "cluster.json");
    const writeFile = () => writeFileSync(input, JSON.stringify(asList(objects.values()), null, 1));
    let api: KubeApiServer | undefined;
    let fake: FakeApiServer | undefined;
    let args: string[];
    const kubeconfig = join(dir.path, "kubeconfig");
    if (opts.source === "file") {
      writeFile();
      args = ["--input", input];
    } else if (opts.fakeApi) {
      fake = await FakeApiServer.start(makeTestCert(dir.path));
      cleanups.unshift(() => fake!.close());
      for (const o of objects.values()) fake.apply(o);
      cleanups.unshift(await forward(topo.node.ns, API_PORT, fake.port));
      args = ["--kubeconfig", fake.writeKubeconfig(dir.path, "kubeconfig", `https://127.0.0.1:${API_PORT}`)];
    } else {
      if (opts.privateApi) {
        api = await KubeApiServer.start();
        cleanups.unshift(() => api!.close());
      } else api = await sharedApiServer();
      // the filler by concurrent POSTs: kubectl would create 4,200 objects one at a time, for minutes
      await api.createMany(filler);
      await applyReal(api, cluster);
      const reached = await apiForNode(topo.node.ns, kubeconfig, { api, port: API_PORT });
      cleanups.unshift(reached.stop);
      args = ["--kubeconfig", reached.kubeconfig];
    }
    args.push("--node-name", NODE, "--backend", opts.backend);

    let kpng: KpngProcess | undefined;
    const d: Deployed = {
      topo,
      source: opts.source,
      backend: opts.backend,
      api,
      fake,
      input: opts.source === "file" ? input : undefined,
      args,
      get kpng() {
        return kpng!;
      },
      async start(o = {}) {
        const p = startKpng(args, { bin: o.bin, wrap: ["ip", "netns", "exec", topo.node.ns] });
        kpng = p;
        // a first load of thousands of services, by the compiled binary or from source, on a loaded machine
        await p.waitFor(/ INFO kpng: synced /, LOADED_WAIT_MS);
        return p;
      },
      async apply(...objs) {
        for (const o of objs) objects.set(keyOf(o), o);
        if (api) await applyReal(api, objs);
        else if (fake) for (const o of objs) fake.apply(o);
        else writeFile();
      },
      async remove(kind, namespace, name) {
        objects.delete(`${kind}/${namespace ?? ""}/${name}`);
        if (api) await api.remove(kind, namespace, name);
        else if (fake) fake.remove(kind, namespace, name);
        else writeFile();
      },
      syncs: () => kpng!.stderr.filter((l) => / INFO kpng: synced /.test(l)).length,
      async syncedAfter(n, timeoutMs = LOADED_WAIT_MS) {
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

/**
 * `kubectl apply` of the objects. A Node's status (its addresses) is kept
 * when it is created but not when it is updated, as for a kubelet: a Node
 * already there gets it through the status subresource.
 */
async function applyReal(api: KubeApiServer, objs: K8sObject[]): Promise<void> {
  const nodes = objs.filter((o) => o.kind === "Node");
  const existing = new Set<string>();
  for (const n of nodes) if ((await api.get(`/api/v1/nodes/${n.metadata.name}`)).status === 200) existing.add(n.metadata.name);
  await api.apply(...objs);
  // a merge patch replaces the address list; a strategic one would merge it by type
  for (const n of nodes.filter((o) => existing.has(o.metadata.name)))
    await api.kubectl([
      "patch",
      "node",
      n.metadata.name,
      "--subresource=status",
      "--type=merge",
      "-p",
      JSON.stringify({ status: n.status }),
    ]);
}

/**
 * Writes an object straight into the control plane's etcd, as JSON (the API
 * server reads JSON as well as its own protobuf there), past the API
 * server's validation: a change made while kube-apiserver is down, as
 * another replica of an HA control plane would take it, or an object stored
 * by another version. `key`: under /registry, e.g.
 * endpointslices/default/empty-ipv4. A running API server sees it through
 * its etcd watch, as it sees its own writes.
 */
export async function putInEtcd(api: KubeApiServer, key: string, obj: Record<string, unknown>): Promise<void> {
  await etcd(api, "put", { key: b64(`/registry/${key}`), value: b64(JSON.stringify(obj)) });
}

/** Deletes a key putInEtcd wrote, behind the API server's back as well (what it could not delete through its own checks). */
export async function deleteInEtcd(api: KubeApiServer, key: string): Promise<void> {
  await etcd(api, "deleterange", { key: b64(`/registry/${key}`) });
}

const b64 = (s: string) => Buffer.from(s).toString("base64");

/** A request to etcd's gRPC gateway, inside the control plane's namespace. */
async function etcd(api: KubeApiServer, op: "put" | "deleterange", body: Record<string, string>): Promise<void> {
  const argv = ["curl", "-sS", "--fail", "--max-time", "10", "-d", "@-", `http://127.0.0.1:2379/v3/kv/${op}`];
  const out = await run(["ip", "netns", "exec", api.ns, ...argv], JSON.stringify(body));
  if (!out.includes("header")) throw new Error(`etcd ${op} ${Buffer.from(body.key, "base64")}: ${out}`);
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
