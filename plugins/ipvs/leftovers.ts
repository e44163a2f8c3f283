// What this backend leaves behind on a node, and what kube-proxy's IPVS mode
// leaves: the dummy device, the ipsets, the iptables chains of its own (the
// ones it shares with iptables mode are plugins/iptables/leftovers.ts'), and
// the `ipvsadm -R` input that removes their virtual servers. The host's
// leftovers sweep (src/host/leftovers/) asks through index.ts.
//
// Facts from kube-proxy's own cleanup (cmd/kube-proxy/app/server_linux.go
// platformCleanup; pkg/proxy/ipvs CleanupLeftovers).

import { FAMILIES, parseIpAddrJson } from "../../src/host/toolkit/index.ts";
import { dummyInterface, setName } from "./names.ts";
import { parseIpvsSave } from "./parse.ts";
import { serviceFlag } from "./print.ts";

type IptTable = "filter" | "nat" | "mangle";

/** Whose chains and ipsets: kpng's IPVS backend's or kube-proxy's IPVS mode's. */
export interface IpvsFootprint {
  ownsChain(table: IptTable, chain: string): boolean;
  ownsIpset(name: string): boolean;
}

const KPNG = "KPNG-";

/** kube-proxy's IPVS-mode chains per table, beside those it shares with iptables mode. */
const KUBE_PROXY_CHAINS: Readonly<Record<IptTable, ReadonlySet<string>>> = {
  nat: new Set(["KUBE-NODE-PORT", "KUBE-LOAD-BALANCER"]),
  filter: new Set(["KUBE-NODE-PORT", "KUBE-SOURCE-RANGES-FIREWALL", "KUBE-IPVS-FILTER", "KUBE-IPVS-OUT-FILTER"]),
  mangle: new Set(),
};

/** kube-proxy's IPVS-mode ipsets (IPv4 names; IPv6 ones are derived below). */
const KUBE_PROXY_IPSETS = [
  "KUBE-LOOP-BACK",
  "KUBE-CLUSTER-IP",
  "KUBE-EXTERNAL-IP",
  "KUBE-EXTERNAL-IP-LOCAL",
  "KUBE-LOAD-BALANCER",
  "KUBE-LOAD-BALANCER-FW",
  "KUBE-LOAD-BALANCER-LOCAL",
  "KUBE-LOAD-BALANCER-SOURCE-IP",
  "KUBE-LOAD-BALANCER-SOURCE-CIDR",
  "KUBE-NODE-PORT-TCP",
  "KUBE-NODE-PORT-LOCAL-TCP",
  "KUBE-NODE-PORT-UDP",
  "KUBE-NODE-PORT-LOCAL-UDP",
  "KUBE-NODE-PORT-SCTP-HASH",
  "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
  "KUBE-HEALTH-CHECK-NODE-PORT",
  "KUBE-IPVS-IPS",
];

/** An IPv6 set's name: "KUBE-" becomes "KUBE-6-", cut to ipset's 31 characters (pkg/proxy/ipvs/ipset.go NewIPSet). */
const ipv6SetName = (name: string) => name.replace(/^KUBE-/, "KUBE-6-").slice(0, 31);

const kubeProxySets: ReadonlySet<string> = new Set(KUBE_PROXY_IPSETS.flatMap((n) => [n, ipv6SetName(n)]));

/** kube-proxy's node-port sets: their members are the node ports of its node-port virtual servers. */
const NODE_PORT_SETS: Readonly<Record<"tcp" | "udp", readonly string[]>> = {
  tcp: ["KUBE-NODE-PORT-TCP", ipv6SetName("KUBE-NODE-PORT-TCP")],
  udp: ["KUBE-NODE-PORT-UDP", ipv6SetName("KUBE-NODE-PORT-UDP")],
};

/** IPVS mode's dummy device: kube-proxy's name, which kpng's IPVS backend keeps (tools look for it). */
export const IPVS_DEVICE = dummyInterface;

/** kpng's: its chains and ipsets, all KPNG- (names.ts); kube-proxy's IPVS mode's: the names above. */
export const IPVS_FOOTPRINT: Readonly<Record<"kpng" | "kube-proxy", IpvsFootprint>> = {
  kpng: { ownsChain: (_table, chain) => chain.startsWith(KPNG), ownsIpset: (name) => name.startsWith(KPNG) },
  "kube-proxy": {
    ownsChain: (table, chain) => KUBE_PROXY_CHAINS[table].has(chain),
    ownsIpset: (name) => kubeProxySets.has(name),
  },
};

export interface VirtualServersListing {
  /** `ipvsadm -Sn`; "" without IPVS */
  ipvs: string;
  /** `ip -j addr show dev kube-ipvs0` */
  deviceAddrs: string;
  /** `ipset save`, parsed: set name -> members */
  sets: ReadonlyMap<string, readonly string[]>;
}

/**
 * The `ipvsadm -R` input deleting the owners' virtual servers: those on an
 * address of kube-ipvs0 (cluster, external and load-balancer IPs, both
 * kube-proxy's and kpng's), and the node-port ones, whose ports kube-proxy
 * keeps in its KUBE-NODE-PORT-* sets and kpng in KPNG-NODE-PORT as
 * ip,proto:port. Other virtual servers (keepalived's, an operator's) stay;
 * kube-proxy's own cleanup flushes them all.
 */
export function virtualServersRemoving(
  listing: VirtualServersListing,
  owners: readonly ("kpng" | "kube-proxy")[],
): { input: string; count: number } {
  const { sets } = listing;
  const onDevice = new Set(parseIpAddrJson(listing.deviceAddrs));
  const nodePorts = new Set<string>();
  if (owners.includes("kube-proxy"))
    for (const proto of ["tcp", "udp"] as const)
      for (const set of NODE_PORT_SETS[proto]) for (const port of sets.get(set) ?? []) nodePorts.add(`${proto} ${port}`);
  const kpngNodePorts = new Set<string>();
  if (owners.includes("kpng")) for (const f of FAMILIES) for (const e of sets.get(setName("nodePort", f)) ?? []) kpngNodePorts.add(e);
  let input = "";
  let count = 0;
  for (const { vs } of parseIpvsSave(listing.ipvs).values()) {
    const ours = onDevice.has(vs.ip) || nodePorts.has(`${vs.proto} ${vs.port}`) || kpngNodePorts.has(`${vs.ip},${vs.proto}:${vs.port}`);
    if (!ours) continue;
    input += `-D ${serviceFlag(vs)}\n`;
    count++;
  }
  return { input, count };
}
