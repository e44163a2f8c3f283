// The API server a start-up or change bench runs kpng against, chosen by
// KPNG_BENCH_API:
//
//   - "real" (the default): the real kube-apiserver 1.36.2 + etcd
//     (test/harness/kube-apiserver.ts), in a network namespace of their own,
//     reached from the node's namespace as https://127.0.0.1:6443 (the
//     harness's byte relay, as kube-proxy's kubeconfig names the API server
//     on a kubeadm node), kpng signed in as system:kube-proxy. Filled once
//     per size for the whole bench process by concurrent POSTs; the
//     figures of docs/performance.md come from it.
//   - "fake": the in-repo test API server (bench/startup-api-server.ts),
//     started afresh for each run inside the node's namespace.
//
// Both hold the same cluster (bench/startup-api-server.ts: N IPv6 services x
// 10 endpoints on 100 nodes, the last service's one endpoint the test pod)
// and change it the same way (the last service's slice to generation n).
// IPv6 services: the harness's IPv6 service range (/112) holds 65,534
// cluster IPs, its IPv4 one 4,094.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { KubeApiServer, requireK8s } from "../test/harness/kube-apiserver.ts";
import { createTopology, type Topology } from "../test/harness/netns.ts";
import { lines } from "./lines.ts";
import { NODES, node, service, slice } from "./startup-api-server.ts";

export type ApiKind = "real" | "fake";

/** KPNG_BENCH_API: "real" unless "fake" is asked for */
export function apiKind(): ApiKind {
  const v = process.env.KPNG_BENCH_API ?? "real";
  if (v !== "real" && v !== "fake") throw new Error(`KPNG_BENCH_API=${v}: "real" (kube-apiserver + etcd) or "fake" (the in-repo server)`);
  return v;
}

export const apiLabel = (kind: ApiKind) =>
  kind === "real" ? "the real kube-apiserver 1.36.2 + etcd (KPNG_BENCH_API=real)" : "the in-repo test API server (KPNG_BENCH_API=fake)";

/** One cluster of `services` services, for the runs of one size. */
export interface BenchApi {
  /** Starts a run: the cluster as first filled (the last slice's endpoint the test pod). Returns kpng's kubeconfig. */
  begin(): Promise<string>;
  /** Sets the last service's slice to generation `n`; resolves with Date.now() once the API server has applied it. */
  change(n: number): Promise<number>;
  /**
   * The API server's work so far, ms: CPU time of kube-apiserver, etcd and the
   * relay (real); the time spent building list answers (fake).
   */
  serverMs(): Promise<number>;
  /** the API server's processes, left out of "the rest of the host" */
  pids(): number[];
  /** the real API server's own network namespace, where https://127.0.0.1:6443 is kube-apiserver itself (no relay) */
  ns?: string;
  /** Ends a run. */
  end(): Promise<void>;
  close(): Promise<void>;
  /** the real API server (KPNG_BENCH_API=real), for a bench that runs the real kube-proxy beside kpng */
  server?: KubeApiServer;
}

export async function openApi(opts: { kind: ApiKind; topo: Topology; services: number; dir: string }): Promise<BenchApi> {
  return opts.kind === "real" ? openReal(opts) : openFake(opts);
}

/** POSTs in flight while filling; the admin user is exempt from API priority and fairness. */
const FILL_CONCURRENCY = Number(process.env.KPNG_BENCH_FILL_CONCURRENCY ?? 32);
/**
 * How the services and slices get into the real API server: "etcd" (the
 * default) writes them straight into its etcd (bench/etcd-fill.ts: seconds
 * for 50,000 services); "posts" creates them through the API, as a client
 * would (minutes per 10,000 on a loaded host).
 */
const FILL = process.env.KPNG_BENCH_FILL ?? "etcd";

/**
 * One filled control plane per size and test pod for the whole bench process:
 * `bun run bench startup churn` fills 10,000 services once (minutes on a
 * loaded 2-core host), not once per bench. Closed by closeApis(), which the
 * runner calls once every bench is done: their processes would keep Bun's
 * event loop, and the bench, alive.
 */
const filled = new Map<string, Promise<KubeApiServer>>();

/**
 * The frame of a bench against an API server: a node topology (one pod) and a
 * scratch folder for the whole run, both removed once `body` is done, however
 * it ends. `body` opens the API server of each size with withApi().
 */
export async function inBenchNode(opts: { prefix: string; dirPrefix: string }, body: (topo: Topology, dir: string) => Promise<void>) {
  const dir = mkdtempSync(join(tmpdir(), opts.dirPrefix));
  const topo = await createTopology({ pods: 1, prefix: opts.prefix });
  try {
    await body(topo, dir);
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** `rows` against the cluster of one size (openApi), its API server closed after them however they end */
export async function withApi(opts: Parameters<typeof openApi>[0], rows: (api: BenchApi) => Promise<void>) {
  const api = await openApi(opts);
  try {
    await rows(api);
  } finally {
    await api.close();
  }
}

/** A bench file run on its own (`bun bench/x.bench.ts`): the bench, then the control planes it filled stopped. */
export async function runAlone(bench: () => Promise<void>) {
  await bench();
  await closeApis();
}

/** Stops the control planes the benches filled. */
export async function closeApis(): Promise<void> {
  const servers = await Promise.all([...filled.values()].map((p) => p.catch(() => undefined)));
  filled.clear();
  await Promise.all(servers.map((s) => s?.close()));
}

function filledServer(services: number, podV6: string): Promise<KubeApiServer> {
  const key = `${services} ${podV6}`;
  let p = filled.get(key);
  if (!p) {
    p = fill(services, podV6);
    filled.set(key, p);
  }
  return p;
}

async function fill(services: number, podV6: string): Promise<KubeApiServer> {
  const server = await KubeApiServer.start();
  try {
    const t0 = Date.now();
    await server.createMany(
      Array.from({ length: NODES }, (_, k) => node(k)),
      FILL_CONCURRENCY,
    );
    if (FILL === "posts")
      await server.createMany(Array.from({ length: services }, (_, i) => [service(i), slice(i, services, podV6)]).flat(), FILL_CONCURRENCY);
    else if (FILL === "etcd") await fillEtcd(server, services, podV6);
    else throw new Error(`KPNG_BENCH_FILL=${FILL}: "etcd" (straight into etcd) or "posts" (through the API)`);
    console.log(
      `  kube-apiserver filled: ${NODES} nodes, ${services} services, ${services} slices in ${((Date.now() - t0) / 1000).toFixed(1)} s (${FILL === "posts" ? `${FILL_CONCURRENCY} POSTs in flight` : "written into etcd, then read by the API server's watch cache"})`,
    );
    return server;
  } catch (err) {
    await server.close();
    throw err;
  }
}

/**
 * bench/etcd-fill.ts in the control plane's namespace, then waits until the
 * API server's watch cache holds etcd's last revision (a list NotOlderThan
 * it is answered from the cache once the cache has caught up): kpng's lists
 * and watch-lists, answered from that cache, then see every object.
 */
async function fillEtcd(server: KubeApiServer, services: number, podV6: string): Promise<void> {
  for (let k = 0; k < 50; k++) {
    const res = await server.request("POST", "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name: `ns-${k}` } });
    if (res.status !== 201 && res.status !== 409) throw new Error(`create namespace ns-${k}: ${res.status} ${await res.text()}`);
  }
  const p = Bun.spawn(
    ["ip", "netns", "exec", server.ns, process.execPath, join(import.meta.dir, "etcd-fill.ts"), String(services), podV6],
    {
      stdout: "pipe",
      stderr: "pipe",
    },
  );
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  const m = /^filled (\d+) (\d+)$/m.exec(out);
  if (code !== 0 || !m) throw new Error(`etcd-fill.ts: ${err}${out}`);
  const end = Date.now() + 600_000;
  for (const path of ["/api/v1/services", "/apis/discovery.k8s.io/v1/endpointslices"]) {
    for (;;) {
      const res = await server.request("GET", `${path}?limit=1&resourceVersion=${m[2]}&resourceVersionMatch=NotOlderThan`);
      await res.arrayBuffer();
      if (res.status === 200) break;
      if (Date.now() > end) throw new Error(`${path}: the API server's cache never reached etcd's revision ${m[2]} (${res.status})`);
      await Bun.sleep(500);
    }
  }
}

async function openReal(opts: { topo: Topology; services: number; dir: string }): Promise<BenchApi> {
  requireK8s();
  const { topo, services, dir } = opts;
  const podV6 = topo.pods[0].v6;
  const server = await filledServer(services, podV6);
  const unreach = await server.reach(topo.node.ns);
  const kubeconfig = server.writeKubeconfig(join(dir, `kubeconfig-real-${services}`), {
    server: "https://127.0.0.1:6443",
    user: "kube-proxy",
  });
  const last = slice(services - 1, services, podV6);
  const path = `/apis/discovery.k8s.io/v1/namespaces/${last.metadata.namespace}/endpointslices/${last.metadata.name}`;
  const change = async (n: number) => {
    // a merge patch replaces the endpoints list whole, as the EndpointSlice controller's update does
    const res = await server.request("PATCH", path, { endpoints: slice(services - 1, services, podV6, n).endpoints });
    if (res.status !== 200) throw new Error(`PATCH ${path}: ${res.status} ${await res.text()}`);
    return Date.now();
  };
  const cpuMs = () => server.pids().reduce((n, p) => n + processCpuMs(p), 0);
  return {
    async begin() {
      await change(0); // a no-op unless a run before changed it
      return kubeconfig;
    },
    change,
    serverMs: async () => cpuMs(),
    pids: () => server.pids(),
    ns: server.ns,
    async end() {},
    close: unreach,
    server,
  };
}

async function openFake(opts: { topo: Topology; services: number; dir: string }): Promise<BenchApi> {
  const { topo, services, dir } = opts;
  let api: Bun.Subprocess<"pipe", "pipe", "inherit"> | undefined;
  let out: ReturnType<typeof lines> | undefined;
  let stats = 0;
  const running = () => {
    if (!api || !out) throw new Error("no run begun");
    return { api, out };
  };
  const say = async (cmd: string) => {
    const { api } = running();
    api.stdin.write(`${cmd}\n`);
    await api.stdin.flush();
  };
  const end = async () => {
    api?.kill();
    await api?.exited;
    api = undefined;
  };
  return {
    async begin() {
      api = Bun.spawn(
        [
          "ip",
          "netns",
          "exec",
          topo.node.ns,
          process.execPath,
          join(import.meta.dir, "startup-api-server.ts"),
          String(services),
          topo.pods[0].v6,
          dir,
        ],
        { stdin: "pipe", stdout: "pipe", stderr: "inherit" },
      );
      out = lines(api.stdout);
      stats = 0;
      return (await out.wait(/^ready /, 1, 120_000)).line.split(" ")[1];
    },
    async change(n) {
      await say(`change ${n}`);
      return (await running().out.wait(new RegExp(`^changed ${n}$`))).at;
    },
    async serverMs() {
      await say("stats");
      return Number((await running().out.wait(/^listMs /, ++stats)).line.split(" ")[1]);
    },
    pids: () => (api ? [api.pid] : []),
    end,
    close: end,
  };
}

const TICK_MS = 10; // USER_HZ is 100 on Linux
/** CPU time of a process and its reaped children, from /proc/PID/stat */
export function processCpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) * TICK_MS;
  } catch {
    return 0;
  }
}
