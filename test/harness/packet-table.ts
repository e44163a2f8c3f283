// The behaviour table of the real-packet suites (test/nft/packets.test.ts,
// test/userspace/packets.test.ts): one address plan, one dual-stack
// LoadBalancer service and the endpoint sets its rows program. The traffic of
// a row is the same for every backend; what answers is the backend's own,
// so each suite writes its rows' names and expectations and takes the rest
// from here.

import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { entry, svc, type SvcSpec } from "../nft/fixtures.ts";
import { type EpOpts, type Expectation, podEndpoints } from "../nft/packet-cases.ts";
import { canonical6, type Topology } from "./netns.ts";

/** a second address on the node, outside the default node port addresses */
export const secondNodeIP = v4.node(10);
export const cip = { v4: v4.clusterIP(10), v6: v6.clusterIP(10) };
export const lb = { v4: v4.external(10), v6: v6.external(10) };
export const ext = { v4: v4.external(11), v6: v6.external(11) };
export const both = [cip.v4, cip.v6];
export const nodeIP = { v4: v4.node(0), v6: canonical6(v6.node(0)) };
export const node = (fam: "v4" | "v6") => nodeIP[fam];
export const fams = ["v4", "v6"] as const;
export const perFamily = (f: (fam: "v4" | "v6") => Expectation[]) => fams.flatMap(f);
export const allPods = ["pod0", "pod1", "pod2"];

/** a dual-stack LoadBalancer service with TCP, UDP and SCTP ports and node ports (and a suite's own ports after them) */
export function web(over: Partial<SvcSpec> = {}, more: SvcSpec["ports"] = []): SvcSpec {
  return {
    name: "web",
    clusterIPs: both,
    lbIPs: [lb.v4, lb.v6],
    externalIPs: [ext.v4, ext.v6],
    ports: [
      { name: "http", port: 80, nodePort: 30080 },
      { name: "dns", protocol: "UDP", port: 53, nodePort: 30053 },
      { name: "sctp", protocol: "SCTP", port: 90, nodePort: 30090 },
      ...more,
    ],
    ...over,
  };
}

export interface TableOptions {
  /** the suite's topology, made in its beforeAll */
  topo: () => Topology;
  /** target port of each service port name, as the pods serve them */
  ports: Record<string, number>;
  /** the suite's web() */
  web: (over?: Partial<SvcSpec>) => SvcSpec;
}

/** the services the table's rows program, on the suite's topology */
export function packetRows({ topo, ports, web }: TableOptions) {
  const on = (pods: (number | [number, EpOpts])[], over: Partial<SvcSpec> = {}): ServiceEndpoints[] => [
    entry(svc(web(over)), podEndpoints(topo(), pods, ports)),
  ];
  const elsewhere = (o: EpOpts): [number, EpOpts][] => [
    [1, { local: false, ...o }],
    [2, { local: false, ...o }],
  ];
  return {
    /** web on these pods */
    on,
    /** web without endpoints */
    none: (): ServiceEndpoints[] => [entry(svc(web()), {})],
    /** a ClusterIP service whose ports 80, 81, 82 target http, alt and bad on pod2 */
    multiPort: (): ServiceEndpoints[] => [
      entry(
        svc({
          name: "multi",
          clusterIPs: both,
          ports: [
            { name: "http", port: 80 },
            { name: "alt", port: 81 },
            { name: "bad", port: 82 },
          ],
        }),
        podEndpoints(topo(), [2], ports),
      ),
    ],
    /** iTP=Local: pod0 local, pod1 and pod2 on other nodes (or, without local, only those) */
    iTPLocal: (): ServiceEndpoints[] => on([0, ...elsewhere({ internal: false })], { iTPLocal: true }),
    iTPLocalNone: (): ServiceEndpoints[] => on(elsewhere({ internal: false }), { iTPLocal: true }),
    /** eTP=Local: pod0 local, pod1 and pod2 on other nodes (or, without local, only those) */
    eTPLocal: (): ServiceEndpoints[] => on([0, ...elsewhere({ external: false })], { eTPLocal: true }),
    eTPLocalNone: (): ServiceEndpoints[] => on(elsewhere({ external: false }), { eTPLocal: true }),
  };
}

/**
 * The rows every backend answers alike, traffic and answers; each suite
 * gives them its own name (what the row means in that backend).
 */
export function commonRows(
  rows: ReturnType<typeof packetRows>,
): Record<string, { services: () => ServiceEndpoints[]; expect: Expectation[] }> {
  return {
    /** every endpoint may answer an outside client, which it sees as the node */
    clusterIP: {
      services: () => rows.on([0, 1, 2]),
      expect: perFamily((f) => [{ from: "client", to: cip[f], port: 80, answer: allPods, source: "node" }]),
    },
    /** node ports on the node's IPs only: not on loopback, not on another local address */
    nodePortAddresses: {
      services: () => rows.on([1]),
      expect: [
        { from: "node", to: "127.0.0.1", port: 30080, error: "refused" },
        { from: "node", to: "::1", port: 30080, error: "refused" },
        { from: "client", to: secondNodeIP, port: 30080, error: "refused" },
        { from: "node", to: v4.node(0), port: 30080, answer: "pod1" },
      ],
    },
    lbAndExternalIPs: {
      services: () => rows.on([2]),
      expect: perFamily((f) => [
        { from: "client", to: lb[f], port: 80, answer: "pod2", source: "node" },
        { from: "client", to: ext[f], port: 80, answer: "pod2", source: "node" },
        { from: "client", to: lb[f], port: 53, proto: "udp", answer: "pod2" },
      ]),
    },
    sourceRangesListed: {
      services: () => rows.on([0], { sourceRanges: ["198.18.128.0/24", "2001:db8:5::/64"] }),
      expect: perFamily((f) => [{ from: "client", to: lb[f], port: 80, answer: "pod0" }]),
    },
    iTPLocal: {
      services: rows.iTPLocal,
      expect: perFamily((f) => Array.from({ length: 6 }, () => ({ from: "client" as const, to: cip[f], port: 80, answer: "pod0" }))),
    },
    hairpin: {
      services: () => rows.on([0]),
      expect: perFamily((f) => [
        { from: "pod0", to: cip[f], port: 80, answer: "pod0", source: "node" },
        { from: "pod0", to: cip[f], port: 53, proto: "udp", answer: "pod0", source: "node" },
      ]),
    },
    undefinedPort: {
      services: () => rows.on([0]),
      expect: perFamily((f) => [
        { from: "client", to: cip[f], port: 81, error: "refused" },
        { from: "pod1", to: cip[f], port: 54, proto: "udp", error: "refused" },
        { from: "node", to: cip[f], port: 81, error: "refused" },
      ]),
    },
  };
}
