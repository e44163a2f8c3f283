// The iptables backend's naming vocabulary. kpng owns only chains whose name
// starts with `KPNG-`, the jump rules it inserts into the built-in chains
// listed in `baseJumps`, and the ipsets in `hairpinSets`; everything else in
// the tables belongs to someone else and is never read back, flushed or deleted.

import { type Family, hashBase32 } from "../../src/host/toolkit/index.ts";
export type Table = "filter" | "nat" | "mangle";

/** Every chain kpng creates starts with this; cleanup and stale-chain removal key on it. */
export const prefix = "KPNG-";

/** Fixed chains, rewritten only by a full restore (their content depends on Config alone, or they hold per-service rules edited one by one). */
export const chains = {
  // nat
  /** dispatch: one rule per service destination, then the jump(s) to NODEPORTS (kept last) */
  services: "KPNG-SERVICES",
  /** one rule per node port */
  nodePorts: "KPNG-NODEPORTS",
  /** ORs the masquerade bit into the packet mark */
  markMasq: "KPNG-MARK-MASQ",
  /** marks packets whose source is outside every cluster CIDR (used when a family has several CIDRs) */
  markNonPod: "KPNG-MARK-NONPOD",
  /** masquerades marked packets */
  postrouting: "KPNG-POSTROUTING",
  // filter
  /** REJECT/DROP for cluster IPs without (local) endpoints; same name as nat's dispatch, other table */
  filterServices: "KPNG-SERVICES",
  /** REJECT/DROP for external IPs and LB IPs without endpoints, then the jump(s) to filter NODEPORTS */
  externalServices: "KPNG-EXTERNAL-SERVICES",
  /** REJECT/DROP for node ports without endpoints */
  filterNodePorts: "KPNG-NODEPORTS",
  /** drops what loadBalancerSourceRanges did not let through to DNAT */
  firewall: "KPNG-FIREWALL",
  /** accepts kpng's forwarded traffic even when the FORWARD policy is DROP */
  forward: "KPNG-FORWARD",
  /** accepts healthCheckNodePort traffic */
  healthCheck: "KPNG-HEALTHCHECK",
  /**
   * drops packets to 127.0.0.0/8 from elsewhere, which route_localnet=1 would
   * otherwise let in (upstream's KUBE-FIREWALL rule, kubernetes issue 90259);
   * exists only while IPv4 node ports answer on localhost (localnetGuardJumps)
   */
  localnetGuard: "KPNG-LOCALNET-GUARD",
  // all three tables
  /** an empty chain whose disappearance means someone flushed the tables: full restore follows */
  canary: "KPNG-CANARY",
} as const;

/**
 * ipsets (`hash:ip,port,ip`, one per family) of the endpoints DNATed straight
 * from a balancing rule, as `ip,proto:port,ip`: KPNG-POSTROUTING masquerades
 * a packet whose `dst,dst,src` is in it, i.e. an endpoint reaching itself
 * through a service (hairpin), which SEP chains did per endpoint. The same
 * match upstream's IPVS mode uses (KUBE-LOOP-BACK).
 */
export const hairpinSets: Readonly<Record<Family, string>> = { v4: "KPNG-HAIRPIN-V4", v6: "KPNG-HAIRPIN-V6" };

/** Shared chains that receive per-service rules one by one (`-I 1` keeps their fixed tail last). */
export const insertAtHead: ReadonlySet<string> = new Set(["nat/KPNG-SERVICES", "filter/KPNG-EXTERNAL-SERVICES"]);

/** Per-service-port chain kinds (upstream kube-proxy's vocabulary). */
export const servicePrefix = {
  /** load-balances over cluster-wide endpoints (a Cluster traffic policy's set) */
  cluster: "KPNG-SVC-",
  /** load-balances over this node's endpoints (a Local traffic policy's set) */
  local: "KPNG-SVL-",
  /** load-balances over Scopes.External endpoints when their set differs from the internal one under the same policy */
  external: "KPNG-SVX-",
  /** external destinations (node port, external IP, LB IP): masquerade and traffic-policy short-circuits */
  ext: "KPNG-EXT-",
  /** loadBalancerSourceRanges filter in front of EXT */
  firewall: "KPNG-FW-",
  /**
   * one endpoint: hairpin masquerade, affinity bookkeeping, DNAT. Only for
   * services with ClientIP affinity, or every endpoint when the host has no
   * ipset; other endpoints are DNATed from the balancing rule (hairpinSets).
   */
  endpoint: "KPNG-SEP-",
} as const;

export interface BaseJump {
  table: Table;
  /** the built-in chain */
  from: string;
  to: string;
  /** extra matches in front of the jump */
  match: readonly string[];
  comment: string;
}

const ctNew = ["-m", "conntrack", "--ctstate", "NEW"] as const;

/** The only rules kpng writes into built-in chains (upstream kube-proxy's iptablesJumpChains, plus the canaries' tables). */
export const baseJumps: readonly BaseJump[] = [
  { table: "nat", from: "PREROUTING", to: chains.services, match: [], comment: "kpng service portals" },
  { table: "nat", from: "OUTPUT", to: chains.services, match: [], comment: "kpng service portals" },
  { table: "nat", from: "POSTROUTING", to: chains.postrouting, match: [], comment: "kpng postrouting rules" },
  { table: "filter", from: "INPUT", to: chains.firewall, match: ctNew, comment: "kpng load balancer firewall" },
  { table: "filter", from: "FORWARD", to: chains.firewall, match: ctNew, comment: "kpng load balancer firewall" },
  { table: "filter", from: "OUTPUT", to: chains.firewall, match: ctNew, comment: "kpng load balancer firewall" },
  { table: "filter", from: "INPUT", to: chains.healthCheck, match: [], comment: "kpng health check node ports" },
  { table: "filter", from: "INPUT", to: chains.externalServices, match: ctNew, comment: "kpng externally-visible service portals" },
  { table: "filter", from: "FORWARD", to: chains.externalServices, match: ctNew, comment: "kpng externally-visible service portals" },
  { table: "filter", from: "OUTPUT", to: chains.externalServices, match: ctNew, comment: "kpng externally-visible service portals" },
  { table: "filter", from: "FORWARD", to: chains.filterServices, match: ctNew, comment: "kpng service portals" },
  { table: "filter", from: "OUTPUT", to: chains.filterServices, match: ctNew, comment: "kpng service portals" },
  { table: "filter", from: "FORWARD", to: chains.forward, match: [], comment: "kpng forwarding rules" },
];

/**
 * The guard's jumps, only while localhost node ports are on (render-fixed.ts):
 * upstream jumps to KUBE-FIREWALL from INPUT and OUTPUT without a condition.
 * A full restore removes them, as any jump not expected, once the setting is off.
 */
export const localnetGuardJumps: readonly BaseJump[] = [
  { table: "filter", from: "INPUT", to: chains.localnetGuard, match: [], comment: "kpng localnet guard" },
  { table: "filter", from: "OUTPUT", to: chains.localnetGuard, match: [], comment: "kpng localnet guard" },
];

/** The fixed chains of each table (declared by every full restore). */
export const fixedChains: Readonly<Record<Table, readonly string[]>> = {
  mangle: [chains.canary],
  nat: [chains.canary, chains.services, chains.nodePorts, chains.markMasq, chains.markNonPod, chains.postrouting],
  filter: [
    chains.canary,
    chains.filterServices,
    chains.externalServices,
    chains.filterNodePorts,
    chains.firewall,
    chains.forward,
    chains.healthCheck,
  ],
};

/** Tables in the order a restore input lists them. */
export const tables: readonly Table[] = ["mangle", "filter", "nat"];

/** iptables' limit on chain names (XT_EXTENSION_MAXNAMELEN 29, minus the NUL). */
export const maxChainName = 28;

/**
 * A stable 16-character name part: sha256 of `input`, RFC 4648 base32,
 * first 16 characters = 80 bits, as upstream kube-proxy does. With the longest
 * prefix ("KPNG-SVC-", 9 characters) a name is 25 characters, under the 28 limit.
 */
export const hashName = (input: string): string => hashBase32(input, 16);

/** `ns/name/proto/port`: the identity of one service port, stable across unrelated edits. */
export const servicePortId = (ns: string, name: string, proto: string, port: number) => `${ns}/${name}/${proto}/${port}`;

export const serviceChain = (kind: keyof typeof servicePrefix, portId: string) => servicePrefix[kind] + hashName(portId);

/** Every chain kind of one service port from one hash (a restore at 10,000 services names up to 4 per port). */
export function serviceChains(portId: string): (kind: keyof typeof servicePrefix) => string {
  const hash = hashName(portId);
  return (kind) => servicePrefix[kind] + hash;
}

/** The endpoint chain is named after the service port and the endpoint's address and target port, not its key. */
export const endpointChain = (portId: string, ip: string, port: number) => servicePrefix.endpoint + hashName(`${portId}/${ip}:${port}`);

export const restoreCommand = (family: Family) => (family === "v4" ? "iptables-restore" : "ip6tables-restore");
export const saveCommand = (family: Family) => (family === "v4" ? "iptables-save" : "ip6tables-save");
export const iptablesCommand = (family: Family) => (family === "v4" ? "iptables" : "ip6tables");
export const ipsetCommand = "ipset";
