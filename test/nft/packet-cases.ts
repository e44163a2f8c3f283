// Helpers for real-packet nft tests: endpoints from pod numbers, probes
// written as expectations ("from the client to the LB IP, answered by pod0,
// source preserved"), and checking them against the namespace topology.

import { expect } from "bun:test";
import type { Config } from "../../src/core/config/config.ts";
import type { Endpoint, ServiceEndpoints } from "../../src/core/brain/state.ts";
import type { Probe, ProbeResult, Proto, Topology } from "../harness/netns.ts";
import { ep } from "./fixtures.ts";

export type Who = "client" | "node" | `pod${number}`;

export interface Expectation {
  from: Who;
  to: string;
  port: number;
  proto?: Proto;
  /** pods allowed to answer */
  answer?: string | string[];
  /** the source address the pod must see: a host, or "self" (the prober, i.e. preserved) */
  source?: Who | "self";
  error?: "refused" | "timeout";
  timeout?: number;
}

export interface PacketCase {
  name: string;
  config?: Partial<Config>;
  services: () => ServiceEndpoints[];
  expect: Expectation[];
  /** run against the topology after applying, before probing */
  before?: (topo: Topology) => Promise<void>;
}

export interface EpOpts {
  local?: boolean;
  internal?: boolean;
  external?: boolean;
}

/** endpoints on pods of the topology, both families, target ports by name */
export function podEndpoints(topo: Topology, pods: (number | [number, EpOpts])[], ports: Record<string, number>): Record<string, Endpoint> {
  const out: Record<string, Endpoint> = {};
  for (const p of pods) {
    const [i, o] = typeof p === "number" ? [p, {}] : p;
    const pod = topo.pods[i];
    out[pod.name] = ep({ ips: [pod.v4, pod.v6], ports, ...o });
  }
  return out;
}

const family = (ip: string) => (ip.includes(":") ? "v6" : "v4");

function host(topo: Topology, who: Who) {
  if (who === "client") return topo.client;
  if (who === "node") return topo.node;
  return topo.pods[Number(who.slice(3))];
}

export const describeExpectation = (e: Expectation) =>
  `${e.from} -> ${e.to}:${e.port}/${e.proto ?? "tcp"}: ${e.error ?? `${[e.answer ?? "any"].flat().join("|")} sees ${e.source ?? "any"}`}`;

/** probes every expectation (one process per source namespace) and asserts it */
export async function check(topo: Topology, expectations: Expectation[]): Promise<void> {
  const bySource = new Map<Who, Expectation[]>();
  for (const e of expectations) bySource.set(e.from, [...(bySource.get(e.from) ?? []), e]);
  for (const [from, list] of bySource) {
    const probes: Probe[] = list.map((e) => ({
      ip: e.to,
      port: e.port,
      proto: e.proto,
      timeout: e.timeout ?? (e.error === "timeout" ? 0.5 : 2),
    }));
    const results = await topo.probeMany(host(topo, from).ns, probes);
    list.forEach((e, i) => assertResult(topo, e, results[i]));
  }
}

function assertResult(topo: Topology, e: Expectation, r: ProbeResult) {
  const label = describeExpectation(e);
  const got = r.ok ? `${r.who} saw ${r.source}` : r.error;
  if (e.error) {
    expect(`${label} => ${got}`).toBe(`${label} => ${e.error}`);
    return;
  }
  expect(`${label} => ${r.ok ? "answered" : got}`).toBe(`${label} => answered`);
  if (!r.ok) return;
  if (e.answer !== undefined) expect([e.answer].flat()).toContain(r.who);
  if (e.source !== undefined) {
    const src = host(topo, e.source === "self" ? e.from : e.source)[family(e.to)];
    expect(`${label} => source ${r.source}`).toBe(`${label} => source ${src}`);
  }
}
