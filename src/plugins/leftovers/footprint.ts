// Who owns what on a node: the names kube-proxy 1.36 writes in each of its
// modes, and kpng's own, as data. Everything the leftovers sweep removes is
// named here; anything else (kubelet's KUBE-FIREWALL, KUBE-KUBELET-CANARY and
// KUBE-IPTABLES-HINT, kube-router's KUBE-ROUTER-* chains and KUBE-SRC-/KUBE-DST-
// ipsets, a CNI's chains) is never touched, which is why no rule here is
// "everything named KUBE-*".
//
// Facts from kube-proxy's own cleanup (cmd/kube-proxy/app/server_linux.go
// platformCleanup; pkg/proxy/iptables, nftables and ipvs CleanupLeftovers).

import { prefix as kpngChainPrefix } from "../../../plugins/iptables/names.ts";
import { dummyInterface } from "../../../plugins/ipvs/names.ts";
import { FAMILIES as NFT_FAMILIES, TABLE as KPNG_NFT_TABLE } from "../../../plugins/nft/names.ts";

export type Owner = "kube-proxy" | "kpng";
export type IptTable = "filter" | "nat" | "mangle";

/** The built-in chains of filter, nat and mangle: jumps from them into an owner's chain are that owner's. */
export const BUILTIN_CHAINS: ReadonlySet<string> = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/**
 * kube-proxy's iptables chains per table, iptables and IPVS modes together
 * (the two modes share KUBE-SERVICES, KUBE-POSTROUTING, KUBE-MARK-MASQ,
 * KUBE-FORWARD and KUBE-PROXY-FIREWALL). KUBE-MARK-DROP is left out, as
 * kube-proxy's cleanup leaves it: kubelet created it too.
 */
const KUBE_PROXY_CHAINS: Readonly<Record<IptTable, ReadonlySet<string>>> = {
  nat: new Set([
    "KUBE-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-PROXY-CANARY",
    // IPVS mode
    "KUBE-NODE-PORT",
    "KUBE-LOAD-BALANCER",
  ]),
  filter: new Set([
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-FORWARD",
    "KUBE-NODEPORTS",
    "KUBE-PROXY-FIREWALL",
    "KUBE-PROXY-CANARY",
    // IPVS mode
    "KUBE-NODE-PORT",
    "KUBE-SOURCE-RANGES-FIREWALL",
    "KUBE-IPVS-FILTER",
    "KUBE-IPVS-OUT-FILTER",
  ]),
  mangle: new Set(["KUBE-PROXY-CANARY"]),
};

/**
 * The chain kube-proxy's iptables and IPVS modes create at start-up in
 * mangle, nat and filter of both families, and watch (pkg/util/iptables
 * Monitor): their rules are flushed when it goes. Its mangle copy is the one
 * to look for: that table is small.
 */
export const KUBE_PROXY_CANARY = "KUBE-PROXY-CANARY";

/** kube-proxy's per-service and per-endpoint chains (iptables mode, nat); KUBE-XLB- is the name before 1.24. */
const KUBE_PROXY_SERVICE_CHAIN_PREFIXES = ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-", "KUBE-XLB-"];

/** Whether `owner` created this chain of `table`. */
export function ownsChain(owner: Owner, table: IptTable, chain: string): boolean {
  if (owner === "kpng") return chain.startsWith(kpngChainPrefix);
  if (KUBE_PROXY_CHAINS[table].has(chain)) return true;
  return table === "nat" && KUBE_PROXY_SERVICE_CHAIN_PREFIXES.some((p) => chain.startsWith(p));
}

/** kube-proxy's nftables mode: one `kube-proxy` table per family; kpng's nft backend: `kpng`. */
export const NFT_TABLES: Readonly<Record<Owner, readonly { family: string; name: string }[]>> = {
  "kube-proxy": [
    { family: "ip", name: "kube-proxy" },
    { family: "ip6", name: "kube-proxy" },
  ],
  kpng: NFT_FAMILIES.map((family) => ({ family, name: KPNG_NFT_TABLE })),
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

/** Whether `owner` created this ipset (kpng: the iptables backend's hairpin sets and the IPVS backend's, all KPNG-). */
export const ownsIpset = (owner: Owner, name: string) => (owner === "kpng" ? name.startsWith(kpngChainPrefix) : kubeProxySets.has(name));

/** kube-proxy's node-port sets: their members are the node ports of its node-port virtual servers. */
export const NODE_PORT_SETS: Readonly<Record<"tcp" | "udp", readonly string[]>> = {
  tcp: ["KUBE-NODE-PORT-TCP", ipv6SetName("KUBE-NODE-PORT-TCP")],
  udp: ["KUBE-NODE-PORT-UDP", ipv6SetName("KUBE-NODE-PORT-UDP")],
};

/** IPVS mode's dummy device: kube-proxy's name, which kpng's IPVS backend keeps (tools look for it). */
export const IPVS_DEVICE = dummyInterface;
