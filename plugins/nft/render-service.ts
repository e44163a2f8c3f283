// Pure: one service (and its endpoints) -> the nft objects of one family.
// The result is what the sync keeps per service, so a later change of this
// service is a diff against it and nothing else is rendered.
//
// Per service port (upstream kube-proxy nftables layout, but for the chain
// per service of plain cluster IPs):
//   service-ips[clusterIP . proto . port]  -> goto dispatch-PROTO-portI-N (Scopes.Internal
//                                             endpoints), or svc-… where a rule needs the service
//   service-ips[externalIP|lbIP . …]       -> goto ext-…  (masquerade / eTP=Local short-circuits,
//   service-nodeports[proto . nodePort]    -> goto ext-…   then Scopes.External endpoints)
//   no-endpoint-*[…]                        -> drop (Local policy) | goto reject-chain
//   firewall-ips[lbIP . …]                  -> goto fw-…  (loadBalancerSourceRanges, before DNAT)
// A dispatch-… chain, shared by the service ports with the same index and
// endpoint count, picks `numgen random mod N` among the endpoints kept in
// cluster-endpoints-PROTO under the packet's own cluster IP (names.ts). A
// svc-/ext- chain picks its endpoint with `numgen random mod N` into its
// slot of a shard map (`dnat to … map @endpoints-tcp-SSS`; one endpoint: a
// plain dnat). With ClientIP affinity it picks among ep-… chains instead
// (`vmap @endpoint-chains-SSS`), each updating its affinity set then DNATing.
// Hairpin masquerade is one rule for all (the `hairpin` set of local
// endpoints). See names.ts for why not a chain per endpoint everywhere.

import {
  affinitySeconds,
  type Endpoint,
  externallyAccessible,
  hostPort,
  ipVersion,
  isPort,
  type PortMapping,
  protocolName,
  servedInFamily,
  type Service,
  targetPort,
  type UdpFrontend,
} from "../../src/plugins/toolkit/index.ts";
import { addressFamily, addrKw, cidrsOfFamily, firstOfFamily, ofFamily, setOf } from "./addr.ts";
import * as N from "./names.ts";
import { place } from "./positions.ts";
import { shardMapSpec, type FamilyConfig } from "./render-base.ts";
import type { SetSpec } from "./transaction.ts";

// Values rendered for the transaction end in Spec (as transaction.ts's
// SetSpec, ChainSpec, ElementSpec): a rule, a chain with its rules, an
// element with the set it goes to and the service that owns it.
export interface RuleSpec {
  rule: string;
  comment?: string;
}
export interface RuleChainSpec {
  name: string;
  rules: RuleSpec[];
}
export interface ServiceElementSpec {
  set: string;
  key: string;
  value?: string;
  comment?: string;
  /** the service key: the element store keeps a settled element as it is, without a record of its claimant (elements.ts) */
  owner: string;
}
export interface ServiceObjects {
  sets: SetSpec[];
  chains: RuleChainSpec[];
  elements: ServiceElementSpec[];
  udp: UdpFrontend[];
  /** dispatch chain -> slot (see names.ts) */
  slots: ReadonlyMap<string, number>;
  /** the shard maps those slots live in */
  maps: SetSpec[];
  /** shared dispatch chains (names.dispatchChain) this service's cluster IPs go to */
  shared: SharedDispatch[];
  /**
   * endpoints left out of a dispatch list longer than MAX_DISPATCH; absent
   * when none (the sync keeps a record per service, and a ninth field moves
   * it from JSC's 80-byte cells to its 112-byte ones)
   */
  truncated?: number;
  /**
   * The map elements of each dispatch list by position (positions.ts), at 2
   * x port index (+1 for the external list); the other elements are in
   * `elements`. The next render of this service keeps each endpoint at its
   * position, and the sync writes only the positions whose value changed:
   * what a wave costs there grows with the wave, not the list.
   */
  lists: (PositionList | undefined)[];
}

/**
 * A dispatch list's map elements, as values by position: element objects
 * and key strings are derived (listKey) only for the positions a sync
 * writes. Most elements at scale are these (10 of 13 per service of 10
 * endpoints), so a position costs one array slot, its value string often
 * the endpoint's own address.
 *
 * Position i is written under key `base + i` (a slot of a shard map), or
 * `IP . base + i` for each cluster IP in `ips` (cluster-endpoints-PROTO,
 * one segment per cluster IP on a shared chain). A value names its endpoint
 * (address, address . port, or endpoint chain): the ids `place` keeps in
 * position.
 */
export interface PositionList {
  set: string;
  /** the service key, as for an element */
  owner: string;
  base: number;
  ips?: readonly string[];
  values: string[];
}

/** the key of position `i` of a list segment (`ip` undefined: a slot of a shard map) */
export const listKey = (ip: string | undefined, base: number, i: number) => (ip === undefined ? String(base + i) : `${ip} . ${base + i}`);

/** a list's elements, segment after segment (for tests and debugging; the sync never builds them all) */
export function listElements(l: PositionList): ServiceElementSpec[] {
  return (l.ips ?? [undefined]).flatMap((ip) => l.values.map((value, i) => ({ set: l.set, key: listKey(ip, l.base, i), value, owner: l.owner })));
}

/** a use of the shared chain `name` = dispatchChainSpec(family, proto, index, n) */
export interface SharedDispatch {
  name: string;
  proto: N.DnatProtocol;
  index: number;
  n: number;
}

/** gives the slot of a dispatch chain: the one it had, else a free one; undefined when none is left */
export type SlotSource = (chain: string) => number | undefined;

interface Target {
  ip: string;
  port: number;
  internal: boolean;
  external: boolean;
  local: boolean;
}

export function renderService(
  key: string,
  svc: Service,
  endpoints: ReadonlyMap<string, Endpoint>,
  fc: FamilyConfig,
  slots: SlotSource,
  /** what the previous render of this service gave: its dispatch lists keep their order */
  prev?: ServiceObjects,
): ServiceObjects {
  const slotOf = new Map<string, number>();
  const out: ServiceObjects = { sets: [], chains: [], elements: [], udp: [], slots: slotOf, maps: [], shared: [], lists: [] };
  const f = fc.family;
  const fam = f === "ip" ? "V4" : "V6";
  const ips = svc.IPs;
  const clusterIPs = ofFamily(f, ips?.ClusterIPs?.[fam]);
  const extIPs = ofFamily(f, ips?.ExternalIPs?.[fam], ips?.LoadBalancerIPs?.[fam]);
  const af = addressFamily(f);
  if (!servedInFamily(svc, af)) return compact(out);

  const ip = addrKw(f);
  const affinity = affinitySeconds(svc);
  // an endpoint's first address of the family (plain loops: 100,000s of endpoints at scale)
  const epList: { ep: Endpoint; addr: string }[] = [];
  for (const ep of endpoints.values()) {
    const addr = firstOfFamily(f, ep.IPs?.[fam]);
    if (addr !== undefined) epList.push({ ep, addr });
  }
  const firewalls = renderFirewalls(key, svc, fc, out);
  const hairpin = new Set<string>();
  /** targets in the positions the previous render of list `at` gave them; `id` gives the element value of a target */
  const inOrder = (targets: Target[], at: number, id: (t: Target) => string): Target[] => place(prev?.lists[at]?.values, targets, id, byAddressAndPort);

  for (const [portIndex, port] of svc.Ports.entries()) {
    const proto = protocolName(port.Protocol);
    if (!proto || !isPort(port.Port)) continue;
    const portId = N.servicePortId(key, proto, port.Name || String(port.Port));
    const targets = targetsOf(port, epList);
    const id = (t: Target) => hostPort(t.ip, t.port);
    const internal: Target[] = [];
    const external: Target[] = [];
    for (const t of targets) {
      if (t.internal) internal.push(t);
      if (t.external) external.push(t);
    }
    const elem = (set: string, k: string, value?: string, comment?: string) => out.elements.push({ set, key: k, value, comment, owner: key });
    const reject = `goto ${N.REJECT_CHAIN}`;
    const epChain = (t: Target) => N.endpointChain(portId, t.ip, t.port);
    const affSet = (t: Target) => N.affinitySet(portId, t.ip, t.port);

    /** rules that pick one of `targets` for the dispatch chain `chain`; `at`: its place in `lists` */
    const dispatch = (chain: string, targets: Target[], at: number): RuleSpec[] => {
      const all = inOrder(targets, at, affinity ? (t) => `goto ${epChain(t)}` : (t) => `${t.ip} . ${t.port}`);
      const list = all.slice(0, N.MAX_DISPATCH);
      if (all.length > list.length) out.truncated = (out.truncated ?? 0) + all.length - list.length;
      // Only a pod on this node can reach itself through this node's rules.
      for (const t of list) if (t.local) hairpin.add(t.ip);
      if (!affinity && list.length === 1) return [{ rule: `meta l4proto ${proto} dnat to ${id(t0(list))}` }];
      if (affinity && list.length === 1) return [{ rule: `goto ${epChain(t0(list))}` }];
      const slot = slots(chain);
      if (slot === undefined) return []; // out of slots: no DNAT, the filter hooks reject
      slotOf.set(chain, slot);
      const base = slot * N.MAX_DISPATCH;
      const pick = `numgen random mod ${list.length} offset ${base}`;
      out.maps.push(shardMapSpec(f, affinity ? "chains" : proto, slot));
      if (!affinity) {
        const map = N.endpointsMap(proto, slot);
        out.lists[at] = { set: map, owner: key, base, values: list.map((t) => `${t.ip} . ${t.port}`) };
        return [{ rule: `meta l4proto ${proto} dnat ${ip} to ${pick} map @${map}` }];
      }
      const chains = N.endpointChainsMap(slot);
      out.lists[at] = { set: chains, owner: key, base, values: list.map((t) => `goto ${epChain(t)}`) };
      return [
        // sorted, not in position order: the chain reads the same whatever the history
        ...[...list].sort(byAddressAndPort).map((t) => ({ rule: `${ip} saddr @${affSet(t)} goto ${epChain(t)}` })),
        { rule: `${pick} vmap @${N.endpointChainsMap(slot)}` },
      ];
    };

    const eLocal = svc.ExternalTrafficToLocal;
    const nodePortsAnswer = fc.nodePortAddresses.length > 0;
    const nodePort = nodePortsAnswer && isPort(port.NodePort) ? port.NodePort : 0;
    const hasExternalFrontend = externallyAccessible(svc, port, af, nodePortsAnswer);
    const shortCircuit = eLocal && internal.length > 0;

    // cluster IPs: a chain of their own only when a rule needs this service
    const ownChain = affinity !== undefined || (shortCircuit && hasExternalFrontend) || internal.some((t) => t.port !== internal[0].port);
    // names are hashed (sha256): only made for the chains that exist
    const svcChain = internal.length && ownChain ? N.clusterChain(portId) : undefined;
    let clusterVerdict = svc.InternalTrafficToLocal ? "drop" : reject;
    if (svcChain) {
      out.chains.push({ name: svcChain, rules: dispatch(svcChain, internal, 2 * portIndex) });
      clusterVerdict = `goto ${svcChain}`;
    } else if (internal.length && clusterIPs.length) {
      const list = inOrder(internal, 2 * portIndex, (t) => t.ip); // one target port: the address is the id
      clusterVerdict = sharedDispatch(out, { owner: key, at: 2 * portIndex, proto, index: portIndex, port: port.Port, clusterIPs, list });
      // Only a pod on this node can reach itself through this node's rules.
      for (const t of list.slice(0, N.MAX_DISPATCH)) if (t.local) hairpin.add(t.ip);
    }
    for (const cip of clusterIPs) {
      elem(N.CLUSTER_IPS_SET, cip);
      elem(internal.length ? N.SERVICE_IPS_MAP : N.NO_ENDPOINT_SERVICES_MAP, `${cip} . ${proto} . ${port.Port}`, clusterVerdict, portId);
    }

    // external IPs, LB IPs, node ports
    if (hasExternalFrontend && (external.length || shortCircuit)) {
      const extChain = N.externalChain(portId);
      const rules: RuleSpec[] = [];
      if (!eLocal) rules.push({ rule: `jump ${N.MARK_MASQ_CHAIN}`, comment: "masquerade traffic that may leave the node" });
      else if (svcChain) {
        // Pods and the node itself reach an eTP=Local service through the
        // cluster endpoints, as if they had gone out to the load balancer
        // and come back; the node is masqueraded, its source being an
        // address the endpoint could not answer.
        if (fc.clusterCIDRs.length)
          rules.push({ rule: `${ip} saddr ${setOf(fc.clusterCIDRs)} goto ${svcChain}`, comment: "short-circuit pod traffic" });
        rules.push({ rule: `fib saddr type local jump ${N.MARK_MASQ_CHAIN}`, comment: "masquerade local traffic" });
        rules.push({ rule: `fib saddr type local goto ${svcChain}`, comment: "short-circuit local traffic" });
      }
      out.chains.push({ name: extChain, rules: [...rules, ...(external.length ? dispatch(extChain, external, 2 * portIndex + 1) : [])] });
      for (const e of extIPs) elem(N.SERVICE_IPS_MAP, `${e} . ${proto} . ${port.Port}`, `goto ${extChain}`, portId);
      if (nodePort) elem(N.SERVICE_NODEPORTS_MAP, `${proto} . ${nodePort}`, `goto ${extChain}`, portId);
    }
    if (!external.length) {
      const verdict = eLocal ? "drop" : reject;
      for (const e of extIPs) elem(N.NO_ENDPOINT_SERVICES_MAP, `${e} . ${proto} . ${port.Port}`, verdict, portId);
      if (nodePort) elem(N.NO_ENDPOINT_NODEPORTS_MAP, `${proto} . ${nodePort}`, verdict, portId);
    }
    for (const fw of firewalls)
      for (const t of fw.targets) elem(N.FIREWALL_IPS_MAP, `${t} . ${proto} . ${port.Port}`, `goto ${fw.chain}`, portId);

    if (affinity)
      for (const t of [...targets].sort(byAddressAndPort)) {
        if (!t.internal && !t.external) continue;
        out.sets.push({ name: affSet(t), type: f === "ip" ? "ipv4_addr" : "ipv6_addr", flags: ["dynamic", "timeout"], timeout: affinity });
        out.chains.push({
          name: epChain(t),
          rules: [{ rule: `update @${affSet(t)} { ${ip} saddr }` }, { rule: `meta l4proto ${proto} dnat to ${id(t)}` }],
        });
      }

    if (proto === "udp") {
      const family = ipVersion(af);
      const extEps = [...new Set([...external, ...(shortCircuit ? internal : [])].map(id))].sort();
      for (const cip of clusterIPs) out.udp.push({ ip: cip, family, port: port.Port, endpoints: internal.map(id) });
      for (const e of extIPs) out.udp.push({ ip: e, family, port: port.Port, endpoints: extEps });
      if (nodePort) out.udp.push({ family, port: nodePort, endpoints: extEps });
    }
  }
  for (const h of [...hairpin].sort()) out.elements.push({ set: N.HAIRPIN_SET, key: `${h} . ${h}`, owner: key });
  return compact(out);
}

// The sync keeps every service's objects, and most services have no sets,
// chains, slots or UDP ports of their own: one shared empty value for each
// instead of 5 empty containers per service (memory that grows with the
// services for nothing).
// Frozen, so a push into one fails loudly instead of reaching every service.
const NONE: never[] = Object.freeze([]) as never[];
const NO_SLOTS: ReadonlyMap<string, number> = new Map();

function compact(out: ServiceObjects): ServiceObjects {
  for (const k of ["sets", "chains", "elements", "udp", "maps", "shared", "lists"] as const) if (!out[k].length) out[k] = NONE;
  if (!out.slots.size) out.slots = NO_SLOTS;
  return out;
}

const t0 = <T>(list: T[]): T => list[0];

/**
 * One target per address and target port (unsorted: positions.ts sorts what it places). Duplicates are found by
 * a scan while the list is short (the usual handful of endpoints: cheaper
 * than a Map), by a Map keyed by the address string beyond.
 */
function targetsOf(port: PortMapping, epList: { ep: Endpoint; addr: string }[]): Target[] {
  const out: Target[] = [];
  const byAddr = epList.length > 16 ? new Map<string, Target>() : undefined;
  for (const { ep, addr } of epList) {
    const tp = targetPort(ep, port);
    if (!isPort(tp)) continue;
    let t = byAddr?.get(addr);
    // rare: one address with several target ports
    if (!byAddr || (t && t.port !== tp)) {
      t = undefined;
      for (const x of out) if (x.ip === addr && x.port === tp) t = x;
    }
    if (!t) {
      t = { ip: addr, port: tp, internal: false, external: false, local: false };
      out.push(t);
      if (byAddr && !byAddr.has(addr)) byAddr.set(addr, t);
    }
    t.local ||= ep.Local;
    t.internal ||= !!ep.Scopes?.Internal;
    t.external ||= !!ep.Scopes?.External;
  }
  return out;
}

const byAddressAndPort = (a: Target, b: Target) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port);

/**
 * The elements that send a service port's cluster IPs through the shared
 * dispatch chain of its index and endpoint count (names.ts), all endpoints
 * having the same target port. Gives the verdict that goes to the chain.
 */
function sharedDispatch(
  out: ServiceObjects,
  o: { owner: string; at: number; proto: N.DnatProtocol; index: number; port: number; clusterIPs: string[]; list: Target[] },
): string {
  const list = o.list.slice(0, N.MAX_DISPATCH);
  if (o.list.length > list.length) out.truncated = (out.truncated ?? 0) + o.list.length - list.length;
  const { use, uses, verdict } = sharedUse(o.proto, o.index, list.length);
  // nearly every service uses one shared chain: that one-element list is shared too
  out.shared = out.shared.length ? [...out.shared, use] : uses;
  // the positions under each cluster IP (one per family: one here)
  out.lists[o.at] = { set: N.clusterEndpointsMap(o.proto), owner: o.owner, base: o.index * N.MAX_DISPATCH, ips: o.clusterIPs, values: list.map((t) => t.ip) };
  for (const cip of o.clusterIPs) out.elements.push({ set: N.clusterTargetPortsMap(o.proto), key: `${cip} . ${o.port}`, value: String(list[0].port), owner: o.owner });
  return verdict;
}

/**
 * A use of a shared dispatch chain and the verdict that goes there, made
 * once per chain: most services hold one (10,000 copies of a few dozen
 * names otherwise). Never changed once made; a cache of pure values.
 */
const sharedUses = new Map<number, { use: SharedDispatch; uses: SharedDispatch[]; verdict: string }>();
function sharedUse(proto: N.DnatProtocol, index: number, n: number) {
  const k = (N.DNAT_PROTOCOLS.indexOf(proto) * 1_000_000 + index) * (N.MAX_DISPATCH + 1) + n;
  let u = sharedUses.get(k);
  if (!u) {
    const name = N.dispatchChain(proto, index, n);
    const use = Object.freeze({ name, proto, index, n });
    sharedUses.set(k, (u = { use, uses: Object.freeze([use]) as SharedDispatch[], verdict: `goto ${name}` }));
  }
  return u;
}

/** one firewall chain per IPFilter with targets in this family: drop sources outside its ranges */
function renderFirewalls(key: string, svc: Service, fc: FamilyConfig, out: ServiceObjects) {
  const f = fc.family;
  const fam = f === "ip" ? "V4" : "V6";
  const result: { chain: string; targets: string[] }[] = [];
  svc.IPFilters.forEach((filter, i) => {
    const targets = ofFamily(f, filter.TargetIPs?.[fam]);
    if (!targets.length) return;
    const chain = N.firewallChain(key, i);
    const ranges = cidrsOfFamily(f, filter.SourceRanges);
    // Ranges only of the other family allow nobody in this one.
    const rule = ranges.length ? `${addrKw(f)} saddr != ${setOf(ranges)} drop` : "drop";
    out.chains.push({ name: chain, rules: [{ rule, comment: "loadBalancerSourceRanges" }] });
    result.push({ chain, targets });
  });
  return result;
}
