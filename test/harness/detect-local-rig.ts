// The real-packet rig for detectLocalMode (kube-proxy's LocalTrafficDetector),
// shared by the nft and iptables suites: the harness topology (client ->
// node -> pod0..pod2 on veths vp0..vp2) plus a "bridged pod" whose veth is a
// port of a Linux bridge br0 in the node namespace, as bridge CNIs (kubenet's
// cbr0, the bridge plugin) attach pods:
//
//   bridged ns  eth0 198.19.5.2/24 <--veth--> bp0 (port of br0 198.19.5.1/24, node ns)
//
// 198.19.5.0/24 is inside the cluster CIDR (198.19.0.0/16) but outside node
// 0's pod CIDR (198.19.0.0/24), so each mode gives it, pod0 and the client a
// different answer, and ClusterCIDR (what kpng did before) another still.
//
// Cases say, per source, whether the endpoint sees the source itself (pod
// traffic: not masqueraded) or the node (masqueraded), and whether an
// eTP=Local external IP without local endpoints short-circuits the source to
// the cluster endpoints (pod traffic) or drops it (anything else). The client
// and pod0 also probe the IPv6 cluster IP (the ip6 table, ip6tables).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { LocalDetect } from "../../src/core/config/config.ts";
import type { ServiceEndpoints } from "../../src/core/brain/state.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";
import { endpoint, entry, service } from "../fixtures/state.ts";
import { createTopology, type ProbeResult, run, type Topology } from "./netns.ts";

export const bridged = { v4: v4.pod(5, 2), gateway: v4.pod(5, 1) };
const PORT = 8080;

export interface DetectLocalWorld {
  topo: Topology;
  /** the bridged pod's namespace */
  bridgedNs: string;
  destroy(): Promise<void>;
}

export async function createDetectLocalWorld(prefix: string): Promise<DetectLocalWorld> {
  const topo = await createTopology({ pods: 3, prefix });
  const bridgedNs = `${topo.id}-brp`;
  let made = false;
  const destroy = async () => {
    if (made) await run(["ip", "netns", "del", bridgedNs]).catch(() => {});
    made = false;
    await topo.destroy();
  };
  try {
    for (const p of topo.pods) await topo.serve(p, { tcp: [PORT] });
    await run(["ip", "netns", "add", bridgedNs]);
    made = true;
    const batch = (ns: string, lines: string[]) => run(["ip", "-n", ns, "-batch", "-"], `${lines.join("\n")}\n`);
    await batch(topo.node.ns, [
      "link add br0 type bridge",
      `addr add ${bridged.gateway}/24 dev br0`,
      "link set br0 up",
      `link add bp0 type veth peer name eth0 netns ${bridgedNs}`,
      "link set bp0 master br0",
      "link set bp0 up",
    ]);
    await batch(bridgedNs, [
      "link set lo up",
      `addr add ${bridged.v4}/24 dev eth0`,
      "link set eth0 up",
      `route add 0.0.0.0/0 via ${bridged.gateway}`,
    ]);
  } catch (err) {
    await destroy();
    throw err;
  }
  return { topo, bridgedNs, destroy };
}

export const clusterIP = v4.clusterIP(20);
/** the same service's IPv6 cluster IP: the client and the veth pods have IPv6 (the bridged pod does not) */
export const clusterIP6 = v6.clusterIP(20);
export const externalIP = v4.external(20);

/**
 * `web`: a cluster IP served by pod1 and pod2; `lonely`: an eTP=Local
 * external IP whose only endpoint (pod2) is on another node, so outside
 * traffic is dropped and only pod traffic (short-circuited to the cluster
 * endpoints) is answered.
 */
export function detectLocalServices(topo: Topology): ServiceEndpoints[] {
  const ep = (i: number, o: { local?: boolean; external?: boolean } = {}) =>
    endpoint({ ips: [topo.pods[i].v4, topo.pods[i].v6], ports: { http: PORT }, local: true, ...o });
  return [
    entry(service({ name: "web", clusterIPs: [clusterIP, clusterIP6], ports: [{ name: "http", port: 80 }] }), { pod1: ep(1), pod2: ep(2) }),
    entry(
      service({
        name: "lonely",
        clusterIPs: [v4.clusterIP(21)],
        externalIPs: [externalIP],
        ports: [{ name: "http", port: 80 }],
        eTPLocal: true,
      }),
      { pod2: ep(2, { local: false, external: false }) },
    ),
  ];
}

export type Source = "client" | "pod0" | "bridged";

export interface DetectLocalCase {
  name: string;
  localDetect: LocalDetect;
  /** the sources the detector calls pods: kept unmasqueraded and short-circuited; the others are masqueraded and dropped */
  pods: Source[];
}

// The cluster CIDR stays configured in every case (Config.clusterCIDRs), as
// on a real node: the mode, not the CIDR, must decide.
export const detectLocalCases: DetectLocalCase[] = [
  {
    name: "BridgeInterface br0: traffic arriving on the bridge is pod traffic, a veth pod inside the cluster CIDR is not",
    localDetect: { kind: "bridge", iface: "br0" },
    pods: ["bridged"],
  },
  {
    name: "InterfaceNamePrefix vp: traffic arriving on vp* is pod traffic, the bridge's is not",
    localDetect: { kind: "prefix", prefix: "vp" },
    pods: ["pod0"],
  },
  {
    name: "NodeCIDR: the Node's pod CIDR (198.19.0.0/24) is pod traffic, the rest of the cluster CIDR is not",
    localDetect: { kind: "node-cidr", cidrs: ["198.19.0.0/24", `${v6.pod(0, 0)}/64`] },
    pods: ["pod0"],
  },
];

export const clusterCIDRs = [plan.v4.clusterCIDR, plan.v6.clusterCIDR];

/** Probes from each source and returns "what happened" lines to compare with `expected`. */
export async function observe(w: DetectLocalWorld): Promise<string[]> {
  const { topo } = w;
  const sources: Record<Source, { ns: string; ip: string; ip6?: string }> = {
    client: { ns: topo.client.ns, ip: topo.client.v4, ip6: topo.client.v6 },
    pod0: { ns: topo.pods[0].ns, ip: topo.pods[0].v4, ip6: topo.pods[0].v6 },
    bridged: { ns: w.bridgedNs, ip: bridged.v4 },
  };
  const out: string[] = [];
  for (const [name, s] of Object.entries(sources) as [Source, (typeof sources)[Source]][]) {
    // generous timeouts: the machine is shared; a drop is what takes the whole timeout
    const [toCluster, toExternal, toCluster6] = await topo.probeMany(s.ns, [
      { ip: clusterIP, port: 80, timeout: 5 },
      { ip: externalIP, port: 80, timeout: 2 },
      ...(s.ip6 ? [{ ip: clusterIP6, port: 80, timeout: 5 }] : []),
    ]);
    const seen = (r: ProbeResult, self: string | undefined, node: string) =>
      !r.ok ? r.error : r.source === self ? "itself" : r.source === node ? "the node" : r.source;
    out.push(`${name} -> cluster IP: the endpoint sees ${seen(toCluster, s.ip, topo.node.v4)}`);
    out.push(`${name} -> eTP=Local external IP: ${toExternal.ok ? `short-circuited to ${toExternal.who}` : toExternal.error}`);
    if (toCluster6) out.push(`${name} -> IPv6 cluster IP: the endpoint sees ${seen(toCluster6, s.ip6, topo.node.v6)}`);
  }
  return out;
}

export function expected(c: DetectLocalCase): string[] {
  return (["client", "pod0", "bridged"] as const).flatMap((s) => {
    const pod = c.pods.includes(s);
    return [
      `${s} -> cluster IP: the endpoint sees ${pod ? "itself" : "the node"}`,
      `${s} -> eTP=Local external IP: ${pod ? "short-circuited to pod2" : "timeout"}`,
      ...(s === "bridged" ? [] : [`${s} -> IPv6 cluster IP: the endpoint sees ${pod ? "itself" : "the node"}`]),
    ];
  });
}

/**
 * The suite for one backend: for each case, `program` programs the node with
 * the services and a Config holding `clusterCIDRs` and the case's
 * `localDetect`, and returns how to close its backend.
 */
export function detectLocalSuite(
  backend: string,
  program: (w: DetectLocalWorld, o: { clusterCIDRs: string[]; localDetect: LocalDetect }) => Promise<() => Promise<void>>,
) {
  let w: DetectLocalWorld;
  beforeAll(async () => {
    w = await createDetectLocalWorld(`kpd${backend.slice(0, 2)}`);
  });
  afterAll(() => w?.destroy());
  describe(`${backend}: detectLocalMode with real packets`, () => {
    for (const c of detectLocalCases)
      test(c.name, async () => {
        const close = await program(w, { clusterCIDRs, localDetect: c.localDetect });
        try {
          expect(await observe(w)).toEqual(expected(c));
        } finally {
          await close();
        }
      }, 60_000);
  });
}
