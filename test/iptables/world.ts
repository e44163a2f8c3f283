// The namespace world the real-packet suites share: the harness topology
// (client -> node -> pods), pods serving TCP/UDP/SCTP, and helpers that turn
// "who answered, from which source" into assertions.

import { expect } from "bun:test";
import { createTopology, type Probe, type ProbeResult, type Topology } from "../harness/netns.ts";
import { ep, type EpSpec } from "./fixtures.ts";

/** Ports every pod serves, and the service port names that map to them. */
export const podPorts = { tcp: 8080, udp: 5353, sctp: 9000 } as const;
export const portNames = { http: podPorts.tcp, dns: podPorts.udp, sc: podPorts.sctp };

export async function createWorld(pods = 3): Promise<Topology> {
  const topo = await createTopology({ pods, prefix: "kpi" });
  try {
    for (const p of topo.pods) await topo.serve(p, { tcp: [podPorts.tcp], udp: [podPorts.udp], sctp: [podPorts.sctp] });
  } catch (err) {
    await topo.destroy();
    throw err;
  }
  return topo;
}

/** An endpoint on pod `i` of the topology (both families, every named port), on this node unless `local: false`. */
export const podEp = (topo: Topology, i: number, opts: Omit<EpSpec, "ips"> = {}) =>
  ep({ ips: [topo.pods[i].v4, topo.pods[i].v6], ports: portNames, local: true, ...opts });

export type From = "client" | "node" | `pod${number}`;

export type Expect = { ok: true; who?: string[]; source?: From } | { error: "refused" | "timeout" };

export interface Check {
  from: From;
  probe: Probe;
  expect: Expect;
}

export function nsOf(topo: Topology, from: From): string {
  if (from === "client") return topo.client.ns;
  if (from === "node") return topo.node.ns;
  return topo.pods[Number(from.slice(3))].ns;
}

export function addressOf(topo: Topology, from: From, v6: boolean): string {
  const host = from === "client" ? topo.client : from === "node" ? topo.node : topo.pods[Number(from.slice(3))];
  return v6 ? host.v6 : host.v4;
}

/** Runs the checks (grouped per source namespace, one probe process each) and asserts every expectation. */
export async function runChecks(topo: Topology, checks: Check[]) {
  const results: ProbeResult[] = new Array(checks.length);
  const byFrom = new Map<From, number[]>();
  checks.forEach((c, i) => byFrom.set(c.from, [...(byFrom.get(c.from) ?? []), i]));
  await Promise.all(
    [...byFrom].map(async ([from, idx]) => {
      const out = await topo.probeMany(
        nsOf(topo, from),
        idx.map((i) => ({ timeout: 1, ...checks[i].probe })),
      );
      idx.forEach((i, k) => (results[i] = out[k]));
    }),
  );
  checks.forEach((c, i) => {
    const r = results[i];
    const what = `${c.from} -> ${c.probe.proto ?? "tcp"} ${c.probe.ip}:${c.probe.port}`;
    if ("error" in c.expect) {
      expect({ what, error: r.ok ? `answered by ${r.who}` : r.error }).toEqual({ what, error: c.expect.error });
      return;
    }
    expect({ what, ok: r.ok, detail: r.ok ? "" : r.error }).toEqual({ what, ok: true, detail: "" });
    if (!r.ok) return;
    if (c.expect.who) expect(c.expect.who).toContain(r.who);
    if (c.expect.source)
      expect({ what, source: r.source }).toEqual({ what, source: addressOf(topo, c.expect.source, c.probe.ip.includes(":")) });
  });
  return results;
}
