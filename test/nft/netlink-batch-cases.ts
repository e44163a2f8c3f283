// The states whose first load is compared through `nft -f` and through
// kpng's own netlink batch (netlink-batch.test.ts, first-load-real.test.ts):
// one service of each shape kpng renders differently, dual-stack, so every
// kind of set and map gets elements; plus a big service whose dispatch list
// fills more than one message of the batch.

import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { entry, ep, nodeState, svc, type EpSpec, type SvcSpec } from "./fixtures.ts";

const eps = (...specs: EpSpec[]) => Object.fromEntries(specs.map((e, i) => [`p${i}`, ep(e)]));

export type Families = readonly ("v4" | "v6")[];

/** one entry per shape, with addresses of `families`: its name, the service and its endpoints */
export function shapes(families: Families = ["v4", "v6"]): { name: string; entry: ServiceEndpoints }[] {
  const ips = (a: string, b: string) => [...(families.includes("v4") ? [a] : []), ...(families.includes("v6") ? [b] : [])];
  const dual = (i: number, e: Partial<EpSpec> = {}): EpSpec => ({
    ips: ips(v4.pod(1, i), v6.pod(1, i)),
    ports: { http: 8080, dns: 5353 },
    ...e,
  });
  const base = (i: number, extra: Partial<SvcSpec> = {}): SvcSpec => ({
    name: `s${i}`,
    clusterIPs: ips(v4.clusterIP(i), v6.clusterIP(i)),
    ports: [{ name: "http", port: 80 }],
    ...extra,
  });
  const np = (i: number) => [{ name: "http", port: 80, nodePort: 30000 + i }];
  const lb = (i: number) => ({ ports: np(i), lbIPs: ips(v4.external(i), v6.external(i)) });
  const list: [string, SvcSpec, Record<string, ReturnType<typeof ep>>][] = [
    ["ClusterIP (shared dispatch chain)", base(1), eps(dual(1), dual(2, { local: false }))],
    ["ClusterIP, endpoints on two target ports", base(2), eps(dual(3), dual(4, { ports: { http: 9090 } }))],
    ["ClusterIP without endpoints (reject)", base(3), {}],
    ["NodePort, eTP=Cluster", base(4, { ports: np(4) }), eps(dual(5), dual(6, { local: false }))],
    ["NodePort, eTP=Local", base(5, { ports: np(5), eTPLocal: true }), eps(dual(7), dual(8, { local: false, external: false }))],
    ["NodePort, eTP=Local, no local endpoint", base(6, { ports: np(6), eTPLocal: true }), eps(dual(9, { local: false, external: false }))],
    [
      "LoadBalancer with source ranges",
      base(7, { ...lb(7), sourceRanges: ips("198.18.128.0/24", "2001:db8:5::/64") }),
      eps(dual(10), dual(11)),
    ],
    [
      "LoadBalancer, eTP=Local, source ranges",
      base(8, { ...lb(8), eTPLocal: true, sourceRanges: ips("198.18.128.0/24", "2001:db8:5::/64") }),
      eps(dual(12)),
    ],
    ["ClientIP affinity", base(9, { affinitySeconds: 30 }), eps(dual(13), dual(14), dual(15))],
    ["ClientIP affinity, NodePort eTP=Local", base(10, { ports: np(10), eTPLocal: true, affinitySeconds: 60 }), eps(dual(16))],
    ["iTP=Local without a local endpoint (drop)", base(11, { iTPLocal: true }), {}],
    [
      "TCP, UDP and SCTP ports, external IPs",
      base(12, {
        externalIPs: ips(v4.external(100), v6.external(100)),
        ports: [
          { name: "http", port: 80, nodePort: 30012 },
          { name: "dns", protocol: "UDP", port: 53 },
          { name: "sctp", protocol: "SCTP", port: 9000 },
        ],
      }),
      eps(dual(17, { ports: { http: 8080, dns: 5353, sctp: 9000 } }), dual(18, { ports: { http: 8080, dns: 5353, sctp: 9000 } })),
    ],
    [
      "IPv4 only",
      { name: "s13", clusterIPs: [v4.clusterIP(13)], ports: [{ name: "http", port: 80 }] },
      eps({ ips: [v4.pod(2, 1)], ports: { http: 8080 } }),
    ],
    [
      "IPv6 only",
      { name: "s14", clusterIPs: [v6.clusterIP(14)], ports: [{ name: "http", port: 80 }] },
      eps({ ips: [v6.pod(2, 1)], ports: { http: 8080 } }),
    ],
  ];
  const other = families.length === 1 ? (families[0] === "v4" ? "IPv6 only" : "IPv4 only") : undefined;
  return list.filter(([name]) => name !== other).map(([name, spec, e]) => ({ name, entry: entry(svc(spec), e) }));
}

/** IPv6 endpoints of the big service: more than one NEWSETELEM message's worth (64 KB) of cluster-endpoints elements */
export const BIG_ENDPOINTS = 1200;

export function bigService(): ServiceEndpoints {
  const spec: SvcSpec = { name: "big", clusterIPs: [v6.clusterIP(200)], ports: [{ name: "http", port: 80 }] };
  return entry(
    svc(spec),
    Object.fromEntries(
      Array.from({ length: BIG_ENDPOINTS }, (_, i) => [
        `b${i}`,
        ep({ ips: [v6.pod(3 + (i >> 12), (i & 4095) + 1)], local: false, ports: { http: 8080 } }),
      ]),
    ),
  );
}

/** every shape and the big service */
export const batchCaptureState = (): NodeState => nodeState([...shapes().map((s) => s.entry), bigService()]);
