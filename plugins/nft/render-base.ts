// The fixed part of each kpng table: maps, sets, base chains and helper
// chains. It depends only on Config, so it is written on full syncs only.

import { type Config, type FamilyLocalDetect, localDetectFor } from "../../src/host/toolkit/index.ts";
import { addressFamily, addrKw, addrType, cidrsOfFamily, loopback, ofFamily, setOf } from "./addr.ts";
import * as N from "./names.ts";
import type { TableFamily } from "./names.ts";
import type { RuleChainSpec } from "./render-service.ts";
import type { Op, SetSpec } from "./transaction.ts";

/** What a family's rules need from Config, resolved once. */
export interface FamilyConfig {
  family: TableFamily;
  /** matches for pod traffic (detectLocalMode): other traffic to cluster IPs is masqueraded; none = nothing is pod traffic */
  local: LocalMatch | undefined;
  masqueradeAll: boolean;
  /** 1 << Config.masqueradeBit, as "0x4000" */
  markBit: string;
  /** elements of the nodeport-ips set; empty = no node ports in this family */
  nodePortAddresses: string[];
}

export function familyConfig(config: Config, family: TableFamily): FamilyConfig {
  // "primary" (and the empty default) means the node's own IPs, as in
  // upstream's nftables mode; CIDRs select every local address inside them.
  const npa = config.nodePortAddresses.length ? config.nodePortAddresses : ["primary"];
  const nodePort = npa.flatMap((a) => (a === "primary" ? ofFamily(family, config.nodeIPs) : cidrsOfFamily(family, [a])));
  return {
    family,
    local: localMatch(family, localDetectFor(config, addressFamily(family))),
    masqueradeAll: config.masqueradeAll,
    markBit: `0x${((1 << config.masqueradeBit) >>> 0).toString(16)}`,
    nodePortAddresses: [...new Set(nodePort)],
  };
}

/** nft match text for pod traffic and for the rest (`iif` would need the interface to exist, and takes no wildcard) */
export interface LocalMatch {
  is: string;
  isNot: string;
}

/**
 * As kube-proxy's nftables mode prints its LocalTrafficDetector (since
 * 1.34.2 with `iifname`; `iif` failed on a wildcard and on a bridge created
 * after the rules): `ip saddr 10.0.0.0/16`, `iifname "cbr0"`, `iifname "veth*"`.
 * Interface names were checked at start-up (config/detect-local.ts): no quote
 * or wildcard of their own.
 */
export function localMatch(family: TableFamily, d: FamilyLocalDetect | undefined): LocalMatch | undefined {
  if (!d) return undefined;
  if (d.kind === "cidrs") {
    const ip = addrKw(family);
    return { is: `${ip} saddr ${setOf(d.cidrs)}`, isNot: `${ip} saddr != ${setOf(d.cidrs)}` };
  }
  const name = JSON.stringify(d.prefix ? `${d.name}*` : d.name);
  return { is: `iifname ${name}`, isNot: `iifname != ${name}` };
}

/** a shard map of dispatch slots (names.ts): endpoint address . port, or a verdict for affinity services */
export function shardMapSpec(f: TableFamily, kind: N.DnatProtocol | "chains", slot: number): SetSpec {
  if (kind === "chains") return { name: N.endpointChainsMap(slot), type: "numgen random mod 2 : verdict", typeOf: true };
  return { name: N.endpointsMap(kind, slot), type: `numgen random mod 2 : ${addrKw(f)} daddr . ${kind} dport`, typeOf: true };
}

/** the maps of the shared dispatch chains (names.ts): endpoint addresses and target ports */
export function clusterEndpointsMapSpecs(f: TableFamily, proto: N.DnatProtocol): SetSpec[] {
  const ip = addrKw(f);
  return [
    {
      name: N.clusterEndpointsMap(proto),
      type: `${ip} daddr . numgen random mod 2 : ${ip} daddr`,
      typeOf: true,
      comment: `cluster IP . port index * ${N.MAX_DISPATCH} + endpoint index -> endpoint, for services without a chain of their own`,
    },
    {
      name: N.clusterTargetPortsMap(proto),
      type: `${ip} daddr . ${proto} dport : ${proto} dport`,
      typeOf: true,
      comment: "cluster IP . port -> target port, for services without a chain of their own",
    },
  ];
}

/** the chain every plain cluster-IP service port at `index` of its service's ports with `n` endpoints goes to */
export function dispatchChainSpec(f: TableFamily, proto: N.DnatProtocol, index: number, n: number): RuleChainSpec {
  const ip = addrKw(f);
  const offset = index ? ` offset ${index * N.MAX_DISPATCH}` : "";
  return {
    name: N.dispatchChain(proto, index, n),
    rules: [
      {
        rule:
          `meta l4proto ${proto} dnat ${ip} to ${ip} daddr . numgen random mod ${n}${offset} map @${N.clusterEndpointsMap(proto)}` +
          ` : ${ip} daddr . ${proto} dport map @${N.clusterTargetPortsMap(proto)}`,
      },
    ],
  };
}

const serviceKeyType = (f: TableFamily) => `${addrType(f)} . inet_proto . inet_service`;

export function renderBase(fc: FamilyConfig): Op[] {
  const f = fc.family;
  const ip = addrKw(f);
  const ops: Op[] = [];
  const chain = (name: string) => ops.push({ kind: "chain", verb: "add", family: f, chain: { name } });
  const rule = (chainName: string, text: string, comment?: string) =>
    ops.push({ kind: "rule", family: f, chain: chainName, rule: text, comment });
  const map = (name: string, keyType: string, comment: string) =>
    ops.push({ kind: "map", verb: "add", family: f, set: { name, type: `${keyType} : verdict`, comment } });

  map(N.SERVICE_IPS_MAP, serviceKeyType(f), "ClusterIP, ExternalIP and LoadBalancer IP traffic");
  map(N.SERVICE_NODEPORTS_MAP, "inet_proto . inet_service", "NodePort traffic");
  map(N.NO_ENDPOINT_SERVICES_MAP, serviceKeyType(f), "vmap to drop or reject packets to services with no endpoints");
  map(N.NO_ENDPOINT_NODEPORTS_MAP, "inet_proto . inet_service", "vmap to drop or reject packets to service nodeports with no endpoints");
  map(N.FIREWALL_IPS_MAP, serviceKeyType(f), "destinations that are subject to LoadBalancerSourceRanges");
  for (const p of N.DNAT_PROTOCOLS)
    for (const set of clusterEndpointsMapSpecs(f, p)) ops.push({ kind: "map", verb: "add", family: f, set });
  ops.push({ kind: "set", verb: "add", family: f, set: { name: N.CLUSTER_IPS_SET, type: addrType(f), comment: "Active ClusterIPs" } });
  ops.push({
    kind: "set",
    verb: "add",
    family: f,
    set: { name: N.HAIRPIN_SET, type: `${addrType(f)} . ${addrType(f)}`, comment: "endpoint . endpoint: hairpin traffic to masquerade" },
  });
  ops.push({
    kind: "set",
    verb: "add",
    family: f,
    set: { name: N.NODEPORT_IPS_SET, type: addrType(f), flags: ["interval"], autoMerge: true, comment: "IPs that accept NodePort traffic" },
  });
  if (fc.nodePortAddresses.length)
    ops.push({ kind: "elements", verb: "add", family: f, set: N.NODEPORT_IPS_SET, items: fc.nodePortAddresses.map((key) => ({ key })) });

  for (const b of N.BASE_CHAINS) ops.push({ kind: "chain", verb: "add", family: f, chain: { name: b.name, base: b } });
  for (const c of N.HELPER_CHAINS) chain(c);
  for (const b of N.BASE_CHAINS) for (const j of b.jumps) rule(b.name, `${j.match ? `${j.match} ` : ""}jump ${j.chain}`);

  const bit = fc.markBit;
  rule(N.MARK_MASQ_CHAIN, `meta mark set meta mark | ${bit}`);
  // A pod reaching itself through a service would see a reply from its own
  // address and drop it: masquerade, as upstream's per-endpoint rule does.
  rule(N.MASQUERADING_CHAIN, `ct status dnat ${ip} saddr . ${ip} daddr @${N.HAIRPIN_SET} masquerade fully-random`, "hairpin");
  rule(N.MASQUERADING_CHAIN, `meta mark & ${bit} == 0 return`);
  rule(N.MASQUERADING_CHAIN, `meta mark set meta mark ^ ${bit}`);
  rule(N.MASQUERADING_CHAIN, "masquerade fully-random");

  // One rule for all services instead of upstream's one per service: the
  // cluster-ips set says the same thing.
  if (fc.masqueradeAll)
    rule(N.SERVICES_CHAIN, `${ip} daddr @${N.CLUSTER_IPS_SET} jump ${N.MARK_MASQ_CHAIN}`, "masquerade all traffic to cluster IPs");
  else if (fc.local)
    rule(
      N.SERVICES_CHAIN,
      `${ip} daddr @${N.CLUSTER_IPS_SET} ${fc.local.isNot} jump ${N.MARK_MASQ_CHAIN}`,
      "masquerade off-cluster traffic to cluster IPs",
    );
  rule(N.SERVICES_CHAIN, `${ip} daddr . meta l4proto . th dport vmap @${N.SERVICE_IPS_MAP}`);
  // Node ports: addresses in nodeport-ips that are really local, never
  // loopback (kube-proxy stopped accepting localhost node ports in 1.26).
  const nodePortMatch = `${ip} daddr != ${loopback(f)} ${ip} daddr @${N.NODEPORT_IPS_SET} fib daddr type local meta l4proto . th dport`;
  if (fc.nodePortAddresses.length) {
    rule(N.SERVICES_CHAIN, `${nodePortMatch} vmap @${N.SERVICE_NODEPORTS_MAP}`);
    rule(N.NODEPORT_ENDPOINTS_CHECK_CHAIN, `${nodePortMatch} vmap @${N.NO_ENDPOINT_NODEPORTS_MAP}`);
  }
  rule(N.FIREWALL_CHECK_CHAIN, `${ip} daddr . meta l4proto . th dport vmap @${N.FIREWALL_IPS_MAP}`);
  rule(N.SERVICE_ENDPOINTS_CHECK_CHAIN, `${ip} daddr . meta l4proto . th dport vmap @${N.NO_ENDPOINT_SERVICES_MAP}`);
  // Only packets no service chain DNATed get here (post-DNAT hooks), so a
  // cluster IP destination means a port the service does not define.
  // TCP gets a reset rather than upstream's ICMP error: a client whose
  // connect() still holds its socket when the ICMP error comes back (a
  // local or very close client) only records it as a soft error and waits
  // for its SYN to time out; a reset fails the connect at once.
  rule(
    N.CLUSTER_IPS_CHECK_CHAIN,
    `${ip} daddr @${N.CLUSTER_IPS_SET} jump ${N.REJECT_CHAIN}`,
    "Reject traffic to invalid ports of ClusterIPs",
  );
  rule(N.REJECT_CHAIN, "meta l4proto tcp reject with tcp reset", "Reject traffic to services with no endpoints");
  rule(N.REJECT_CHAIN, "reject");
  return ops;
}
