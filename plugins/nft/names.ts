// The nft backend's naming vocabulary: every table, chain, set and map name
// kpng writes is built here, so `nft list ruleset` reads the same way
// everywhere and no other file invents a name.
//
// Layout follows upstream kube-proxy's nftables mode
// (pkg/proxy/nftables/proxier.go): one table per family, verdict maps for
// O(1) dispatch, a chain per service port and per endpoint.

import { hashBase32 } from "../../src/host/toolkit/index.ts";

/** kpng's own tables: `ip kpng` and `ip6 kpng`. Nothing else is ever touched. */
export const TABLE = "kpng";
export const FAMILIES = ["ip", "ip6"] as const;
export type TableFamily = (typeof FAMILIES)[number];

// ---- maps: the O(1) dispatch points -------------------------------------
/** daddr . l4proto . dport -> goto the service's cluster or external chain */
export const SERVICE_IPS_MAP = "service-ips";
/** l4proto . dport -> goto the service's external chain (daddr checked against NODEPORT_IPS_SET) */
export const SERVICE_NODEPORTS_MAP = "service-nodeports";
/** daddr . l4proto . dport -> drop (Local policy, no local endpoint) or goto reject-chain (no endpoint) */
export const NO_ENDPOINT_SERVICES_MAP = "no-endpoint-services";
export const NO_ENDPOINT_NODEPORTS_MAP = "no-endpoint-nodeports";
/** daddr . l4proto . dport -> goto the service's firewall chain (loadBalancerSourceRanges) */
export const FIREWALL_IPS_MAP = "firewall-ips";

/**
 * Cluster-IP dispatch without a chain per service. The service-ips verdict
 * of a plain cluster IP is `goto dispatch-PROTO-portI-N`, one chain shared
 * by every service port that is port I of its service (its index in the
 * ports) and has N endpoints, all with the same target port. Its rule:
 *   dnat to ip daddr . numgen random mod N offset I*MAX_DISPATCH map @cluster-endpoints-PROTO
 *          : ip daddr . tcp dport map @cluster-target-ports-PROTO
 * so endpoint addresses are found under the cluster IP itself (unique per
 * node state: the API server allocates them) and the port's range of
 * indexes, the target port under the cluster IP and port.
 *
 * Why: nft 1.0.6 dumps every chain of the ruleset into its cache before any
 * rule or element command, and `nft -i` refetches after each commit: a cost
 * per transaction that grows with the chain count. With chains per endpoint count, an
 * endpoint change costs the same at 10 and 10,000 services, and a full sync
 * skips 10,000 chains and rules. Why an index and no target port in the
 * map: nft's time per element grows with its parts (and a full sync sends
 * 100,000s), and port numbers would multiply the
 * shared chains. Few chains also mean few rules bound to the map (see the
 * shards below). A shared chain exists while a service uses it. A service
 * port keeps a chain of its own (svc-…, dispatching through a slot) where a
 * rule needs it: ClientIP affinity, eTP=Local short-circuits, endpoints with
 * different target ports.
 */
export const clusterEndpointsMap = (proto: DnatProtocol) => CLUSTER_ENDPOINTS_MAPS[proto];
export const clusterTargetPortsMap = (proto: DnatProtocol) => CLUSTER_TARGET_PORTS_MAPS[proto];
/** the shared cluster-IP dispatch chain of the port at `index` in a service's ports, with `n` endpoints */
export const dispatchChain = (proto: DnatProtocol, index: number, n: number) => `dispatch-${proto}-port${index}-${n}`;

/**
 * Endpoint choice without a chain per endpoint: a dispatch list (the
 * endpoints one service port balances to for one traffic class) owns a
 * *slot*, i.e. the keys [slot << SLOT_BITS, + N) of one shard map, and its
 * chain does `dnat to numgen random mod N offset (slot << SLOT_BITS) map
 * @endpoints-PROTO-SS`. Why not upstream's per-service anonymous vmap and chain
 * per endpoint: every anonymous set makes the kernel scan all sets of the
 * table for a free name and the transaction for its id (quadratic in the
 * services), and a chain and a rule per endpoint alone would take a full
 * sync at scale past its budget (bench nft). Why shards: adding an element to a map
 * makes the kernel visit every rule bound to that map (nft_add_set_elem), so
 * one map bound by 10,000 chains is quadratic again (and binding a map walks
 * its elements): the work is bindings x elements / SHARDS. 256 shards keep
 * it small; the kernel finds a set by name with a list walk, which is why
 * not one map per service. A shard map exists only while a slot uses it.
 * Services with ClientIP affinity keep a chain per endpoint (it must update
 * the affinity set), reached through the same slots in ENDPOINT_CHAINS maps.
 * Which endpoint sits at which key, in a slot or under a cluster IP, is kept
 * from one sync to the next (positions.ts): a rolling update rewrites the
 * keys of the endpoints it replaced, not the whole list.
 */
export const SHARDS = 256;
export const SLOT_BITS = 14;
/** at most this many endpoints per dispatch list; more are cut (and logged) */
export const MAX_DISPATCH = 1 << SLOT_BITS;
/** (1 << 32) >> SLOT_BITS: numgen results are 32-bit */
export const MAX_SLOTS = 1 << (32 - SLOT_BITS);
export const ALL_SHARDS = Array.from({ length: SHARDS }, (_, i) => i);
/**
 * One set of DNAT maps per protocol: their type must be written `typeof
 * numgen … : ip daddr . tcp dport` (numgen has no named type), and nft 1.0.6
 * reading back a `th dport` map from the kernel rejects rules that match
 * `meta l4proto tcp` ("conflicting protocols specified: tcp vs. th").
 */
export const DNAT_PROTOCOLS = ["tcp", "udp", "sctp"] as const;
export type DnatProtocol = (typeof DNAT_PROTOCOLS)[number];
const shardNames = (prefix: string) => ALL_SHARDS.map((i) => `${prefix}-${String(i).padStart(3, "0")}`);
const ENDPOINTS_MAPS = Object.fromEntries(DNAT_PROTOCOLS.map((p) => [p, shardNames(`endpoints-${p}`)])) as Record<DnatProtocol, string[]>;
const ENDPOINT_CHAINS_MAPS = shardNames("endpoint-chains");
// names made once: the sync keeps every service's elements, each naming its set
const byProto = (name: (p: DnatProtocol) => string) =>
  Object.fromEntries(DNAT_PROTOCOLS.map((p) => [p, name(p)])) as Record<DnatProtocol, string>;
const CLUSTER_ENDPOINTS_MAPS = byProto((p) => `cluster-endpoints-${p}`);
const CLUSTER_TARGET_PORTS_MAPS = byProto((p) => `cluster-target-ports-${p}`);
/** slot index -> endpoint address . port */
export const endpointsMap = (proto: DnatProtocol, slot: number) => ENDPOINTS_MAPS[proto][slot % SHARDS];
/** slot index -> goto endpoint chain (services with affinity) */
export const endpointChainsMap = (slot: number) => ENDPOINT_CHAINS_MAPS[slot % SHARDS];

// ---- sets ----------------------------------------------------------------
/** endpoint . endpoint: a DNATed packet whose source is its own endpoint (hairpin) is masqueraded */
export const HAIRPIN_SET = "hairpin";
/** every cluster IP: traffic to one that was not DNATed hit an undefined port -> reject */
export const CLUSTER_IPS_SET = "cluster-ips";
/** addresses (or CIDRs) that answer node ports: Config.nodePortAddresses, default Config.nodeIPs */
export const NODEPORT_IPS_SET = "nodeport-ips";
/**
 * One element naming kpng's last transaction (watch.ts): every transaction
 * kpng commits replaces it, so `nft monitor` tells kpng's commits from
 * other processes'. Only in the `ip` table.
 */
export const SYNC_STAMP_SET = "sync-stamp";

// ---- helper chains ---------------------------------------------------------
export const SERVICES_CHAIN = "services";
export const MASQUERADING_CHAIN = "masquerading";
export const MARK_MASQ_CHAIN = "mark-for-masquerade";
export const FIREWALL_CHECK_CHAIN = "firewall-check";
export const SERVICE_ENDPOINTS_CHECK_CHAIN = "service-endpoints-check";
export const NODEPORT_ENDPOINTS_CHECK_CHAIN = "nodeport-endpoints-check";
export const CLUSTER_IPS_CHECK_CHAIN = "cluster-ips-check";
export const REJECT_CHAIN = "reject-chain";

export const HELPER_CHAINS = [
  SERVICES_CHAIN,
  MASQUERADING_CHAIN,
  MARK_MASQ_CHAIN,
  FIREWALL_CHECK_CHAIN,
  SERVICE_ENDPOINTS_CHECK_CHAIN,
  NODEPORT_ENDPOINTS_CHECK_CHAIN,
  CLUSTER_IPS_CHECK_CHAIN,
  REJECT_CHAIN,
] as const;

// ---- base chains -----------------------------------------------------------
export interface BaseChain {
  name: string;
  type: "filter" | "nat";
  hook: "prerouting" | "input" | "forward" | "output" | "postrouting";
  priority: string;
  /** helper chains jumped to from this base chain, in order, with an optional match */
  jumps: { chain: string; match?: string }[];
}

const newConn = "ct state new";

/**
 * The hooks kpng attaches to, with numeric priorities (nft 1.0.6 accepts the
 * "dstnat" keyword only on prerouting): dstnat = -100, srcnat = 100.
 * Filter checks that must see the *service* address run before DNAT
 * (-110): source ranges. Checks that must only see packets no service
 * chain DNATed run after it (-90): the
 * no-endpoint verdicts and undefined cluster-IP ports. Upstream runs the
 * no-endpoint check in output *before* DNAT, which drops host traffic to an
 * eTP=Local LB IP that has no local endpoint although the short-circuit
 * would have sent it to a cluster endpoint; running it after DNAT keeps the
 * short-circuit working. Input and forward hooks come after prerouting's
 * DNAT whatever their priority.
 */
export const BASE_CHAINS: readonly BaseChain[] = [
  {
    name: "filter-prerouting",
    type: "filter",
    hook: "prerouting",
    priority: "-110",
    jumps: [{ chain: FIREWALL_CHECK_CHAIN, match: newConn }],
  },
  {
    name: "filter-input",
    type: "filter",
    hook: "input",
    priority: "-110",
    jumps: [
      { chain: NODEPORT_ENDPOINTS_CHECK_CHAIN, match: newConn },
      { chain: SERVICE_ENDPOINTS_CHECK_CHAIN, match: newConn },
    ],
  },
  {
    name: "filter-forward",
    type: "filter",
    hook: "forward",
    priority: "-110",
    jumps: [
      { chain: SERVICE_ENDPOINTS_CHECK_CHAIN, match: newConn },
      { chain: CLUSTER_IPS_CHECK_CHAIN, match: newConn },
    ],
  },
  { name: "filter-output", type: "filter", hook: "output", priority: "-110", jumps: [{ chain: FIREWALL_CHECK_CHAIN, match: newConn }] },
  {
    name: "filter-output-post-dnat",
    type: "filter",
    hook: "output",
    priority: "-90",
    jumps: [
      { chain: SERVICE_ENDPOINTS_CHECK_CHAIN, match: newConn },
      { chain: CLUSTER_IPS_CHECK_CHAIN, match: newConn },
    ],
  },
  { name: "nat-prerouting", type: "nat", hook: "prerouting", priority: "-100", jumps: [{ chain: SERVICES_CHAIN }] },
  { name: "nat-output", type: "nat", hook: "output", priority: "-100", jumps: [{ chain: SERVICES_CHAIN }] },
  { name: "nat-postrouting", type: "nat", hook: "postrouting", priority: "100", jumps: [{ chain: MASQUERADING_CHAIN }] },
];

// ---- per-service names -----------------------------------------------------
// Character set: nft identifiers may hold [A-Za-z0-9_./-] after a leading
// letter. Kubernetes names and port names already fit; anything else (and
// IPv6 colons) becomes "_" / ".", which could make two names equal, so every
// per-service name carries an 8-character hash of the *unsanitised* id, as
// upstream does. Length budget: nft names are at most 255 bytes; the longest
// id (63-char namespace and name, 15-char port name, IPv6 endpoint) stays
// under 210, and anything longer is cut after the hash.

const MAX_NAME = 255;
/** First 8 base32 characters of sha256(id): 40 bits, ample for one node's names. */
export const hash8 = (id: string): string => hashBase32(id, 8);

const sanitize = (s: string) => s.replace(/:/g, ".").replace(/[^A-Za-z0-9_./-]/g, "_");

function named(prefix: string, id: string): string {
  return `${prefix}-${hash8(id)}-${sanitize(id)}`.slice(0, MAX_NAME);
}

/** "ns/name/tcp/http": how a service port reads in names and comments */
export const servicePortId = (svcKey: string, proto: string, portName: string) => `${svcKey}/${proto}/${portName}`;

/** dispatch over the endpoints usable for cluster-IP traffic (Scopes.Internal) */
export const clusterChain = (portId: string) => named("svc", portId);
/** entry for node ports, external IPs and LB IPs: masquerade / short-circuit, then Scopes.External */
export const externalChain = (portId: string) => named("ext", portId);
/** loadBalancerSourceRanges of one IPFilter of a service */
export const firewallChain = (svcKey: string, index: number) => named("fw", `${svcKey}/${index}`);
/** DNAT to one endpoint (address and target port) of one service port */
export const endpointChain = (portId: string, ip: string, port: number) => named("ep", `${portId}__${ip}/${port}`);
/** ClientIP affinity: sources recently sent to one endpoint of one service port */
export const affinitySet = (portId: string, ip: string, port: number) => named("aff", `${portId}__${ip}/${port}`);

/** nft comments are limited to 128 bytes and must not contain a double quote */
export const comment = (text: string) => text.replace(/["\\\n]/g, "_").slice(0, 128);
