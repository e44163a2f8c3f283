// The userspace relay beside nft, through one Service (a cluster IP, one
// endpoint), in network namespaces: client ns -> node ns -> pod ns. For each
// backend, at 1 and 100 concurrent connections:
//
//   connect latency   connect() to the server's first byte, p50 / p99
//                     (400 connections);
//   throughput        STREAMS connections writing 64 KiB chunks for 3 s;
//   CPU per GB        user+system time per GB moved: of the relay process
//                     (userspace only: nft's work is the kernel's, charged
//                     to whoever runs the softirq), and of the client and
//                     server processes (which carry the kernel's network
//                     stack work done in their context).
//
// Then the cost of a sync at scale (SIZES, default 1,000 and 10,000 services
// of one TCP port on an IPv6 cluster IP, one endpoint each, bind mode): the
// first sync (addresses added, relays listening), one endpoint change, and
// the relay process's RSS and open descriptors.
//
// `bun run bench userspace`. Prints figures, asserts nothing. On a shared
// 2-core machine every figure moves with the neighbours' load: compare the
// two backends of one run, not runs.

import { readFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { createNftBackend } from "../plugins/nft/index.ts";
import { BUN } from "../test/harness/kpng-process.ts";
import { v4, v6 } from "../test/fixtures/addresses.ts";
import { createTopology, saidReady, type Topology } from "../test/harness/netns.ts";
import { context, entry, ep, nodeConfig, nodeState, svc } from "../test/nft/fixtures.ts";
import { startProxy } from "../test/userspace/rig.ts";

const PORT = 9100;
const CIP = v4.clusterIP(10);
const peer = join(import.meta.dir, "userspace-peer.ts");
const SECONDS = Number(process.env.SECONDS_PER_RUN ?? 3);

/** utime + stime of a process, in seconds */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / 100;
}

async function runPeer(topo: Topology, ns: string, args: string[]): Promise<{ out: unknown; cpu: number }> {
  const p = Bun.spawn(["ip", "netns", "exec", ns, BUN, peer, ...args], { stdout: "pipe", stderr: "inherit" });
  let cpu = 0;
  const poll = setInterval(() => {
    try {
      cpu = cpuSeconds(p.pid);
    } catch {
      // exited
    }
  }, 50);
  const text = await new Response(p.stdout).text();
  clearInterval(poll);
  await p.exited;
  void topo;
  return { out: JSON.parse(text), cpu };
}

const pct = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
};

interface Row {
  backend: string;
  conc: number;
  p50: number;
  p99: number;
  gbps: number;
  relayCpuPerGB?: number;
  peersCpuPerGB: number;
}

async function measure(topo: Topology, backend: string, serverPid: number, relayPid?: number): Promise<Row[]> {
  const rows: Row[] = [];
  for (const conc of [1, 100]) {
    const lat = await runPeer(topo, topo.client.ns, ["latency", CIP, String(PORT), String(conc), "400"]);
    const ms = (lat.out as { ms: number[] }).ms;
    const s0 = cpuSeconds(serverPid);
    const r0 = relayPid ? cpuSeconds(relayPid) : 0;
    const tp = await runPeer(topo, topo.client.ns, ["throughput", CIP, String(PORT), String(conc), String(SECONDS)]);
    const { bytes, seconds } = tp.out as { bytes: number; seconds: number };
    const gb = bytes / 1e9;
    const server = cpuSeconds(serverPid) - s0;
    rows.push({
      backend,
      conc,
      p50: pct(ms, 0.5),
      p99: pct(ms, 0.99),
      gbps: (bytes * 8) / seconds / 1e9,
      relayCpuPerGB: relayPid ? (cpuSeconds(relayPid) - r0) / gb : undefined,
      peersCpuPerGB: (tp.cpu + server) / gb,
    });
  }
  return rows;
}

export async function scale(topo: Topology) {
  const sizes = (process.env.SIZES ?? "1000,10000").split(",").map(Number);
  console.log("\nsync at scale (bind mode, IPv6 cluster IPs, 1 TCP port and 1 endpoint a service)");
  console.log("services  first sync  one endpoint change  RSS      descriptors");
  for (const n of sizes) {
    const services = (salt: number) =>
      Array.from({ length: n }, (_, i) =>
        entry(svc({ namespace: "bench", name: `s${i}`, clusterIPs: [v6.clusterIP(i + 1)], ports: [{ name: "p", port: 80 }] }), {
          a: ep({ ips: [v6.pod(0, 2 + ((i + (i === 0 ? salt : 0)) % 200))], ports: { p: 8080 } }),
        }),
      );
    const proxy = await startProxy(topo);
    try {
      await proxy.apply(services(0));
      const first = proxy.lastMs;
      await proxy.apply(services(1));
      const change = proxy.lastMs;
      const rss = Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${proxy.pid}/status`, "utf8"))?.[1] ?? 0) / 1024;
      const fds = Number((await topo.exec(topo.node.ns, ["sh", "-c", `ls /proc/${proxy.pid}/fd | wc -l`])).trim());
      console.log(
        `${String(n).padStart(8)}  ${(first / 1000).toFixed(2).padStart(8)} s  ${change.toFixed(0).padStart(15)} ms  ${rss.toFixed(0).padStart(5)} MB  ${String(fds).padStart(8)}`,
      );
      await proxy.apply([]);
    } finally {
      await proxy.stop();
    }
  }
}

export default async function bench() {
  const topo = await createTopology({ pods: 1, prefix: "kpbu" });
  const server = Bun.spawn(["ip", "netns", "exec", topo.pods[0].ns, BUN, peer, "serve", String(PORT)], {
    stdout: "pipe",
    stderr: "inherit",
  });
  try {
    if (!(await saidReady(server.stdout))) throw new Error("bench server did not start");
    const state = nodeState([
      entry(svc({ name: "bench", clusterIPs: [CIP], ports: [{ name: "p", port: PORT }] }), { a: ep({ ips: [topo.pods[0].v4] }) }),
    ]);
    const rows: Row[] = [];

    const nft = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    await nft.apply(state, null);
    rows.push(...(await measure(topo, "nft", server.pid)));
    await nft.cleanup();
    await nft.close();

    const proxy = await startProxy(topo);
    await proxy.apply([...state.services.values()]);
    rows.push(...(await measure(topo, "userspace", server.pid, proxy.pid)));
    await proxy.stop();

    console.log(
      `one Service, one endpoint; ${SECONDS} s per throughput run, 64 KiB writes; latency over 400 connections; load average ${loadavg()[0]!.toFixed(1)} at the end`,
    );
    console.log("backend    conc  connect p50   p99      throughput   relay CPU/GB  client+server CPU/GB");
    for (const r of rows) {
      console.log(
        `${r.backend.padEnd(10)} ${String(r.conc).padStart(4)}  ${r.p50.toFixed(2).padStart(8)} ms ${r.p99.toFixed(2).padStart(7)} ms  ${r.gbps.toFixed(2).padStart(6)} Gbit/s  ${r.relayCpuPerGB === undefined ? "         -" : `${r.relayCpuPerGB.toFixed(2).padStart(8)} s`}  ${r.peersCpuPerGB.toFixed(2).padStart(8)} s`,
      );
    }
    for (const conc of [1, 100]) {
      const a = rows.find((r) => r.backend === "nft" && r.conc === conc)!;
      const b = rows.find((r) => r.backend === "userspace" && r.conc === conc)!;
      console.log(`conc ${conc}: userspace throughput ${(b.gbps / a.gbps).toFixed(2)}x nft's, connect p50 ${(b.p50 / a.p50).toFixed(1)}x`);
    }
    await scale(topo);
  } finally {
    server.kill();
    await server.exited;
    await topo.destroy();
  }
}

if (import.meta.main) await bench();
