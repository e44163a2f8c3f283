// The brain of `bun run bench global` as deployed (issue 40 goal 5): the
// compiled `kpng serve --kubeconfig` (bench/kpng-under-test.ts) reading the
// real kube-apiserver 1.36.2 + etcd filled by bench/bench-api.ts (etcd-fill:
// N IPv6 services x 10 endpoints on 100 nodes), signed in as
// system:kube-proxy, in a network namespace of its own (the API server
// reached there as https://127.0.0.1:6443, as on a kubeadm node). It serves a
// unix socket (the nft agents) and loopback TCP with mutual TLS (the light
// streams, started in its namespace) with the flags an operator passes
// (--listen-tls-crt/-key/-ca). A change is a PATCH of the last service's
// EndpointSlice, timed when the API server has applied it: a stream's
// latency includes the watch from the API server to the brain.

import { join } from "node:path";
import { listenTls, makeMutualTls } from "../test/harness/tls-flags.ts";
import { startKpng } from "../test/harness/kpng-process.ts";
import { createTopology } from "../test/harness/netns.ts";
import { openApi } from "./bench-api.ts";
import { kpngsUnderTest } from "./kpng-under-test.ts";
import { treeCpuMs } from "./proc-cpu.ts";

/** What the bench asks of a brain, generated (bench/global-brain.ts) or `kpng serve` against the real API server. */
export interface BenchBrain {
  pid: number;
  /** what global-consumers.ts connects to: `tls:PORT:DIR` or the socket */
  target: string;
  /** in front of a consumer process's command: its network namespace */
  wrap: string[];
  /** the unix socket (the agents, in namespaces of their own) */
  sock: string;
  /** the kpng command of the agents (the compiled binary, or the source) */
  kpng: string[];
  /** The full binary on the same cluster, for node node-1 (its command, without the backend flags); `ns`: a namespace of its own, when the brain's is not needed. */
  full(ns: string): string[];
  /** RSS and peak RSS (bytes), streams dropped for not reading, JS heap (bytes; undefined where not known) */
  rss(): Promise<{ rss: number; hwm: number; dropped: number; heap?: number }>;
  /** how late the event loop ran since the last call (ms; undefined where not known) */
  lag(): Promise<number | undefined>;
  /** One endpoint change: when the brain's source had it (epoch ms), the brain's flush (ms, where known), its CPU ms before it. */
  change(): Promise<{ at: number; flushMs?: number; cpu0: number }>;
  close(): Promise<void>;
}

const kb = (status: string, k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(status)?.[1] ?? 0) * 1024;

export async function realBrain(opts: { dir: string; services: number }): Promise<BenchBrain> {
  const { dir, services } = opts;
  makeMutualTls(dir);
  const topo = await createTopology({ pods: 1, prefix: "kpg" });
  const closers: Array<() => Promise<unknown>> = [() => topo.destroy()];
  const close = async () => {
    for (const c of closers.splice(0).reverse()) await c().catch(() => undefined);
  };
  try {
    const t0 = Date.now();
    const api = await openApi({ kind: "real", topo, services, dir });
    closers.push(() => api.close());
    const kubeconfig = await api.begin();
    const [kpng] = await kpngsUnderTest(dir);
    const sock = join(dir, "brain.sock");
    const spawnedAt = Date.now();
    const brain = startKpng(
      ["serve", "--kubeconfig", kubeconfig, "--listen", `unix://${sock}`, "--listen", "tcp://127.0.0.1:0", ...listenTls(dir)],
      { bin: kpng.argv[0], wrap: ["ip", "netns", "exec", topo.node.ns], env: { HOME: "/dev/null" } },
    );
    closers.push(() => brain.stop());
    const serving = await brain.waitFor(/serving the API/, 600_000);
    const port = /127\.0\.0\.1:(\d+)/.exec(serving)?.[1];
    if (!port) throw new Error(`kpng serve: no TCP address in ${serving}`);
    console.log(
      `  kpng serve --kubeconfig (${kpng.name}, compiled; mutual TLS): serving ${((Date.now() - spawnedAt) / 1000).toFixed(1)} s after start (the cluster ready ${((spawnedAt - t0) / 1000).toFixed(1)} s after the bench began)`,
    );
    const pid = brain.proc.pid; // `ip netns exec` execs kpng
    let n = 0;
    return {
      pid,
      target: `tls:${port}:${dir}`,
      wrap: ["ip", "netns", "exec", topo.node.ns],
      sock,
      kpng: kpng.argv,
      // in the brain's namespace, where the API server is reached; kpng serve programs nothing there
      full: () => ["ip", "netns", "exec", topo.node.ns, ...kpng.argv, "--kubeconfig", kubeconfig, "--hostname-override", "node-1"],
      async rss() {
        const status = await Bun.file(`/proc/${pid}/status`).text();
        const dropped = brain.stderr.filter((l) => l.includes("dropped a stream whose client stopped reading")).length;
        return { rss: kb(status, "VmRSS"), hwm: kb(status, "VmHWM"), dropped };
      },
      lag: async () => undefined,
      async change() {
        const cpu0 = treeCpuMs(pid);
        return { at: await api.change(++n), cpu0 };
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
