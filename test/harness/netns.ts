// Real-packet test topology in network namespaces, shared by the nft and
// iptables suites. Nothing here touches the host's namespace: every command
// that changes state runs as `ip netns exec NS ...` or `ip -n NS ...`, veth
// peers are created *inside* the node namespace and moved straight into
// their own namespace, and only addresses of test/fixtures/addresses.ts exist.
//
//          client ns                     node ns                    pod ns (xN)
//   eth0 198.18.128.1/24  <--veth-->  ext0 203.0.113.10/24    vpI <--veth--> eth0 198.19.0.(I+1)/32
//        2001:db8:5::1/64                 2001:db8:3::a/64    (fe80::1)          2001:db8:2::(I+1)/128
//   default via the node                routes to client       default via 203.0.113.10 / fe80::1
//                                       and to each pod /32;
//                                       default dev uplink0 (a sink)
//
// API (keep it small and stable: another backend's suite uses it):
//
//   const topo = await createTopology({ pods: 3 });   // afterAll(() => topo.destroy())
//   topo.node / topo.client: { ns, v4, v6 }           topo.pods[i]: { ns, name: "podI", v4, v6 }
//                                                     (v6 in RFC 5952 form, as servers report sources)
//   await topo.exec(ns, ["nft", "list", "ruleset"])   // stdout; throws NetnsError on exit != 0
//   topo.executor(topo.node.ns)                       // an Executor for a backend under test
//   await topo.serve(topo.pods[0], { tcp: [80], udp: [53], sctp: [9000] })
//   await topo.probe(topo.client.ns, { ip, port, proto: "tcp", timeout: 1 })
//     -> { ok: true, who: "pod0", source: "198.18.128.1", ms } | { ok: false, error: "refused" | "timeout" | ... }
//   await topo.probeMany(ns, [probe, ...])            // one process for many probes (fast)
//   await topo.destroy()                              // idempotent; also runs at process exit
//
// Servers answer "<pod name> <source address they saw>" on TCP, UDP and SCTP
// (SCTP over raw sockets: this kernel has no SCTP sockets; see echo_server.py).

import { join } from "node:path";
import type { Executor } from "../../src/host/backend.ts";
import { type RunOptions, runCommand, type StdinChunk } from "../../src/host/toolkit/command.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";

export interface Host {
  /** network namespace name */
  readonly ns: string;
  readonly v4: string;
  readonly v6: string;
}

export interface Pod extends Host {
  /** what the pod's server answers: "pod0", "pod1", ... */
  readonly name: string;
}

export type Proto = "tcp" | "udp" | "sctp";

export interface Probe {
  ip: string;
  port: number;
  /** "http": a GET of `path`, answered with the status code as `who` */
  proto?: Proto | "http";
  /** HTTP path for proto "http" (default /) */
  path?: string;
  /** seconds to wait for an answer (default 1) */
  timeout?: number;
  /** fixed source port, e.g. to keep one UDP conntrack flow across calls */
  sport?: number;
  /** source address to bind (TCP/UDP), e.g. a second address of the client */
  src?: string;
}

export type ProbeResult =
  | { ok: true; who: string; source: string; ms: number; connectMs?: number }
  | { ok: false; error: "refused" | "timeout" | "unreachable" | "error"; detail: string; ms: number };

export interface ServePorts {
  tcp?: number[];
  udp?: number[];
  sctp?: number[];
}

export interface TopologyOptions {
  /** number of pod namespaces (default 2) */
  pods?: number;
  /** namespace name prefix (default "kpt"); a random suffix is always added */
  prefix?: string;
}

export interface Topology {
  readonly id: string;
  readonly node: Host;
  readonly client: Host;
  readonly pods: readonly Pod[];
  exec(ns: string, argv: string[], stdin?: string): Promise<string>;
  executor(ns: string): Executor;
  serve(pod: Pod, ports: ServePorts): Promise<void>;
  stopServer(pod: Pod): Promise<void>;
  probe(from: string, probe: Probe): Promise<ProbeResult>;
  probeMany(from: string, probes: Probe[]): Promise<ProbeResult[]>;
  destroy(): Promise<void>;
}

export class NetnsError extends Error {
  override readonly name = "NetnsError";
}

const here = import.meta.dir;

/** Whether a helper script's first output is its "ready" line (each prints one once it listens). */
export async function saidReady(stdout: ReadableStream<Uint8Array>): Promise<boolean> {
  const reader = stdout.getReader();
  const first = await reader.read();
  reader.releaseLock();
  return new TextDecoder().decode(first.value ?? new Uint8Array()).startsWith("ready");
}

// Resolved once: a pyenv-style `python3` shim adds a slow start to every run.
let python: string | undefined;
export async function pythonPath(): Promise<string> {
  python ??= (await run(["python3", "-c", "import sys; print(sys.executable)"])).trim() || "python3";
  return python;
}

/** Runs a command and returns stdout; throws with argv and stderr on failure. */
export async function run(argv: string[], stdin?: string | Iterable<StdinChunk>, opts?: RunOptions): Promise<string> {
  const { code, stdout, stderr } = await runCommand(argv, stdin, opts);
  if (code !== 0) throw new NetnsError(`${argv.join(" ")}: exit ${code}: ${stderr.trim()}`);
  return stdout;
}

/** RFC 5952 text of an IPv6 address, as servers print the peers they see */
export const canonical6 = (ip: string) => new URL(`http://[${ip}]/`).hostname.slice(1, -1);

const live = new Set<string>();
let exitHookInstalled = false;
function installExitHook() {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  // A crashed or interrupted suite must not leave namespaces behind.
  process.on("exit", () => {
    for (const ns of live) Bun.spawnSync(["ip", "netns", "del", ns], { stderr: "ignore" });
  });
}

const sysctls = (pairs: Record<string, string | number>) => ["sysctl", "-q", "-w", ...Object.entries(pairs).map(([k, v]) => `${k}=${v}`)];

// DAD would leave fresh IPv6 addresses "tentative" for a second or more.
const noDad = { "net.ipv6.conf.all.accept_dad": 0, "net.ipv6.conf.default.accept_dad": 0 };

export async function createTopology(opts: TopologyOptions = {}): Promise<Topology> {
  installExitHook();
  const id = `${opts.prefix ?? "kpt"}${Math.random().toString(36).slice(2, 8)}`;
  const node: Host = { ns: `${id}-node`, v4: v4.node(0), v6: canonical6(v6.node(0)) };
  const client: Host = { ns: `${id}-cli`, v4: v4.client(1), v6: canonical6(v6.client(1)) };
  const pods: Pod[] = Array.from({ length: opts.pods ?? 2 }, (_, i) => ({
    ns: `${id}-pod${i}`,
    name: `pod${i}`,
    v4: v4.pod(0, i + 1),
    v6: canonical6(v6.pod(0, i + 1)),
  }));
  const servers = new Map<string, Bun.Subprocess>();
  const all = [node.ns, client.ns, ...pods.map((p) => p.ns)];

  /** runs argv inside `ns`; stdin whole or streamed (Executor.stream), opts as runCommand takes them */
  const inNs = (ns: string) => (argv: string[], stdin?: string | Iterable<StdinChunk>, opts?: RunOptions) =>
    run(["ip", "netns", "exec", ns, ...argv], stdin, opts);
  const exec = (ns: string, argv: string[], stdin?: string) => inNs(ns)(argv, stdin);
  const ipBatch = (ns: string, lines: string[]) => run(["ip", "-n", ns, "-batch", "-"], lines.join("\n") + "\n");

  const stopServer = async (pod: Pod) => {
    const p = servers.get(pod.ns);
    if (!p) return;
    servers.delete(pod.ns);
    p.kill();
    await p.exited;
  };

  let destroyed = false;
  const destroy = async () => {
    if (destroyed) return;
    destroyed = true;
    await Promise.all(pods.map(stopServer));
    for (const ns of all) {
      if (!live.has(ns)) continue;
      await run(["ip", "netns", "del", ns]).catch(() => {});
      live.delete(ns);
    }
  };

  const probeMany = async (from: string, probes: Probe[]): Promise<ProbeResult[]> => {
    if (probes.length === 0) return [];
    const out = await exec(from, [await pythonPath(), "-S", join(here, "probe.py")], JSON.stringify(probes));
    return JSON.parse(out) as ProbeResult[];
  };

  const topo: Topology = {
    id,
    node,
    client,
    pods,
    exec,
    // as deployed: with stream, the program reads while the caller still writes (Executor.stream)
    executor: (ns) => ({ run: inNs(ns), stream: inNs(ns) }),
    async serve(pod, ports) {
      await stopServer(pod);
      const specs = (["tcp", "udp", "sctp"] as const).flatMap((p) => (ports[p] ?? []).map((n) => `${p}:${n}`));
      const p = Bun.spawn(
        ["ip", "netns", "exec", pod.ns, await pythonPath(), "-u", "-S", join(here, "echo_server.py"), pod.name, ...specs],
        {
          cwd: here,
          stdout: "pipe",
          stderr: "inherit",
        },
      );
      servers.set(pod.ns, p);
      if (!(await saidReady(p.stdout))) {
        await stopServer(pod);
        throw new NetnsError(`server in ${pod.ns} did not start (${specs.join(" ")})`);
      }
    },
    stopServer,
    probe: async (from, probe) => (await probeMany(from, [probe]))[0],
    probeMany,
    destroy,
  };

  try {
    for (const ns of all) {
      await run(["ip", "netns", "add", ns]);
      live.add(ns);
      await exec(ns, sysctls({ ...noDad, "net.ipv4.conf.all.rp_filter": 0, "net.ipv4.conf.default.rp_filter": 0 }));
    }
    await exec(
      node.ns,
      sysctls({
        "net.ipv4.ip_forward": 1,
        "net.ipv6.conf.all.forwarding": 1,
        // Hairpin traffic leaves by the interface it came in, which makes the
        // node send ICMP redirects; a redirect resets the per-host ICMP rate
        // limiter, and the next reject's ICMP error is silently skipped. Tests
        // need every reject answered.
        "net.ipv4.conf.all.send_redirects": 0,
        "net.ipv4.conf.default.send_redirects": 0,
        "net.ipv4.icmp_ratelimit": 0,
        "net.ipv6.icmp.ratelimit": 0,
      }),
    );
    await ipBatch(node.ns, [
      "link set lo up",
      // The node's "uplink": one end of a veth pair whose other end stays
      // down (this kernel has no dummy driver). It holds the default routes,
      // so service IPs are routable as on a real node, while packets nobody
      // answers vanish here instead of leaving the namespaces.
      "link add uplink0 type veth peer name uplink1",
      "link set uplink0 arp off up",
      "route add 0.0.0.0/0 dev uplink0",
      "route add ::/0 dev uplink0",
      `link add ext0 type veth peer name eth0 netns ${client.ns}`,
      `addr add ${node.v4}/24 dev ext0`,
      `addr add ${node.v6}/64 dev ext0 nodad`,
      "link set ext0 up",
      `route add ${plan.v4.clientCIDR} dev ext0`,
      `route add ${plan.v6.clientCIDR} dev ext0`,
      ...pods.flatMap((p, i) => [
        `link add vp${i} type veth peer name eth0 netns ${p.ns}`,
        `addr add fe80::1/64 dev vp${i} nodad`,
        `link set vp${i} up`,
        `route add ${p.v4}/32 dev vp${i}`,
        `route add ${p.v6}/128 dev vp${i}`,
      ]),
    ]);
    await ipBatch(client.ns, [
      "link set lo up",
      `addr add ${client.v4}/24 dev eth0`,
      `addr add ${client.v6}/64 dev eth0 nodad`,
      "link set eth0 up",
      `route add ${plan.v4.nodeCIDR} dev eth0`,
      `route add ${plan.v6.nodeCIDR} dev eth0`,
      `route add 0.0.0.0/0 via ${node.v4}`,
      `route add ::/0 via ${node.v6}`,
    ]);
    for (const p of pods) {
      await ipBatch(p.ns, [
        "link set lo up",
        `addr add ${p.v4}/32 dev eth0`,
        `addr add ${p.v6}/128 dev eth0 nodad`,
        "link set eth0 up",
        `route add ${node.v4}/32 dev eth0`,
        `route add 0.0.0.0/0 via ${node.v4} dev eth0`,
        "route add ::/0 via fe80::1 dev eth0",
      ]);
    }
  } catch (err) {
    await destroy();
    throw err;
  }
  return topo;
}

/** What a continuous probe (probe_loop.py) reports when stopped. */
export interface ProbeRun {
  rounds: number;
  connections: number;
  failed: number;
  /** the first failures: probe index, seconds since the start, error */
  failures: Array<{ i: number; t: number; error: string; detail: string }>;
  /** per probe, each change of verdict (who answered, the HTTP status, or the error) with its time (epoch ms) */
  timeline: Array<Array<[number, string]>>;
}

/**
 * probe_loop.py round after round over `probes`, started by `wrap` (the argv
 * that runs it: `ip netns exec NS`, maybe inside a cgroup), resolved once its
 * first round is done; `stop()` ends it and tells how many connections it made
 * and which failed.
 */
export async function startProbeLoop(
  wrap: (argv: string[]) => string[],
  probes: Probe[],
  pauseMs: number,
): Promise<{ stop(): Promise<ProbeRun> }> {
  const p = Bun.spawn(wrap([await pythonPath(), "-u", "-S", join(here, "probe_loop.py")]), {
    cwd: here,
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
  });
  p.stdin.write(JSON.stringify({ probes, pauseMs }) + "\n");
  await p.stdin.flush();
  const reader = p.stdout.getReader();
  const dec = new TextDecoder();
  let text = "";
  while (!text.includes("ready\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error("probe_loop.py ended before its first round");
    text += dec.decode(value, { stream: true });
  }
  return {
    async stop() {
      p.stdin.end();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
      await p.exited;
      return JSON.parse(text.trim().split("\n").at(-1)!) as ProbeRun;
    },
  };
}
