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
  type Family,
  hostPort,
  ipVersion,
  isPort,
  type PortMapping,
  protocolName,
  servedInFamily,
  type Service,
  targetPort,
  type UdpFrontend,
} from "../../src/host/toolkit/index.ts";
import { addressFamily, addrKw, addrType, cidrsOfFamily, firstOfFamily, ofFamily, setOf } from "./addr.ts";
import * as N from "./names.ts";
import { place } from "./positions.ts";
import { shardMapSpec, type FamilyConfig } from "./render-base.ts";
import type { ElementSpec, SetSpec } from "./transaction.ts";

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

/**
 * One position of a list segment as an element to write: the netlink encoder
 * (netlink-batch.ts) reads its parts, the segment's cluster IP (the same
 * object for the whole segment) and the position as a number, and its key
 * text is made only when it is printed. A first load writes every position
 * (10 of 13 elements a service at 10 endpoints): text built to be parsed
 * back was most of the encoder's work.
 */
export class ListElement implements ElementSpec {
  constructor(
    /** the segment's cluster IP; undefined for a slot of a shard map */
    readonly ip: string | undefined,
    /** base + i: the numgen result this position answers */
    readonly position: number,
    readonly value?: string,
  ) {}
  get key(): string {
    return listKey(this.ip, this.position, 0);
  }
}

/** a list's elements, segment after segment (for tests and debugging; the sync never builds them all) */
export function listElements(l: PositionList): ServiceElementSpec[] {
  return (l.ips ?? [undefined]).flatMap((ip) =>
    l.values.map((value, i) => ({ set: l.set, key: listKey(ip, l.base, i), value, owner: l.owner })),
  );
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
  /** with affinity: its endpoint chain and affinity set, named on first use */
  chain: string | undefined;
  affinitySet: string | undefined;
}

/** the endpoints with an address of the family being rendered, and that address (`addrs[i]` is `eps[i]`'s first): two lists, not an object per endpoint */
interface FamilyEndpoints {
  eps: Endpoint[];
  addrs: string[];
}

/** one service's render in progress: the facts its parts read, and the objects they add to */
interface ServiceRender {
  key: string;
  svc: Service;
  fc: FamilyConfig;
  af: Family;
  /** the address keyword of rules: ip or ip6 */
  ip: string;
  affinity: number | undefined;
  clusterIPs: string[];
  /** external and load-balancer IPs */
  extIPs: string[];
  firewalls: Firewall[];
  slots: SlotSource;
  prev: ServiceObjects | undefined;
  out: ServiceObjects;
  /** out.slots, writable: made for the first slot (most services have none) */
  slotOf: Map<string, number> | undefined;
  /** local endpoints a dispatch list holds (made for the first: most services have none) */
  hairpin: Set<string> | undefined;
}

/** what the rules of one service port are made of, worked out once for all of them */
interface PortFacts {
  index: number;
  proto: N.DnatProtocol;
  port: number;
  /** 0: no node port in this family */
  nodePort: number;
  /** names.servicePortId: this port's chains and sets are named from it */
  id: string;
  targets: Target[];
  internal: Target[];
  external: Target[];
  hasExternalFrontend: boolean;
  /** eTP=Local with internal endpoints: pods and the node go to the cluster endpoints */
  shortCircuit: boolean;
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
  const f = fc.family;
  const fam = f === "ip" ? "V4" : "V6";
  const ips = svc.IPs;
  const af = addressFamily(f);
  // most services are single-stack: nothing at all in the other family
  if (!servedInFamily(svc, af)) return NOTHING;
  // `shared` and `slots` are replaced, never added to (sharedDispatch, renderDispatch)
  const out: ServiceObjects = { sets: [], chains: [], elements: [], udp: [], slots: NO_SLOTS, maps: [], shared: NONE, lists: [] };
  const firewalls = renderFirewalls(key, svc, fc, out);
  const s: ServiceRender = {
    key,
    svc,
    fc,
    af,
    ip: addrKw(f),
    affinity: affinitySeconds(svc),
    clusterIPs: ofFamily(f, ips?.ClusterIPs?.[fam]),
    extIPs: ofFamily(f, ips?.ExternalIPs?.[fam], ips?.LoadBalancerIPs?.[fam]),
    firewalls,
    slots,
    prev,
    out,
    slotOf: undefined,
    hairpin: undefined,
  };
  const epList = endpointsOfFamily(f, endpoints);
  for (let index = 0; index < svc.Ports.length; index++) {
    const p = portFacts(s, index, svc.Ports[index], epList);
    if (p) renderPort(s, p);
  }
  if (s.hairpin) for (const h of [...s.hairpin].sort()) out.elements.push({ set: N.HAIRPIN_SET, key: `${h} . ${h}`, owner: key });
  return compact(out);
}

/** an endpoint's first address of the family, for each endpoint that has one (plain loops: 100,000s of endpoints at scale) */
function endpointsOfFamily(f: N.TableFamily, endpoints: ReadonlyMap<string, Endpoint>): FamilyEndpoints {
  const fam = f === "ip" ? "V4" : "V6";
  const eps: Endpoint[] = [];
  const addrs: string[] = [];
  for (const ep of endpoints.values()) {
    const addr = firstOfFamily(f, ep.IPs?.[fam]);
    if (addr === undefined) continue;
    eps.push(ep);
    addrs.push(addr);
  }
  return { eps, addrs };
}

/** undefined for a port no rule can serve (unknown protocol, no port number) */
function portFacts(s: ServiceRender, index: number, port: PortMapping, epList: FamilyEndpoints): PortFacts | undefined {
  const proto = protocolName(port.Protocol);
  if (!proto || !isPort(port.Port)) return undefined;
  const targets = targetsOf(port, epList);
  const internal = inScope(targets, true);
  const nodePortsAnswer = s.fc.nodePortAddresses.length > 0;
  return {
    index,
    proto,
    port: port.Port,
    nodePort: nodePortsAnswer && isPort(port.NodePort) ? port.NodePort : 0,
    id: N.servicePortId(s.key, proto, port.Name || String(port.Port)),
    targets,
    internal,
    external: inScope(targets, false),
    hasExternalFrontend: externallyAccessible(s.svc, port, s.af, nodePortsAnswer),
    shortCircuit: s.svc.ExternalTrafficToLocal && internal.length > 0,
  };
}

/** one service port's chains, sets, elements and UDP frontends */
function renderPort(s: ServiceRender, p: PortFacts) {
  const svcChain = renderClusterIPs(s, p);
  renderExternal(s, p, svcChain);
  for (const fw of s.firewalls)
    for (const t of fw.targets) element(s, N.FIREWALL_IPS_MAP, `${t} . ${p.proto} . ${p.port}`, `goto ${fw.chain}`, p.id);
  if (s.affinity) renderAffinity(s, p, s.affinity);
  if (p.proto === "udp") renderUdpFrontends(s, p);
}

const REJECT = `goto ${N.REJECT_CHAIN}`;

function element(s: ServiceRender, set: string, key: string, value?: string, comment?: string) {
  s.out.elements.push({ set, key, value, comment, owner: s.key });
}

/** the cluster IPs' elements, and the chain they go to; gives the service's own chain (svc-…) if it has one */
function renderClusterIPs(s: ServiceRender, p: PortFacts): string | undefined {
  const { internal } = p;
  // cluster IPs: a chain of their own only when a rule needs this service
  const ownChain = s.affinity !== undefined || (p.shortCircuit && p.hasExternalFrontend) || !onePort(internal);
  // names are hashed (sha256): only made for the chains that exist
  const svcChain = internal.length && ownChain ? N.clusterChain(p.id) : undefined;
  let clusterVerdict = s.svc.InternalTrafficToLocal ? "drop" : REJECT;
  if (svcChain) {
    s.out.chains.push({ name: svcChain, rules: renderDispatch(s, p, svcChain, internal, 2 * p.index) });
    clusterVerdict = `goto ${svcChain}`;
  } else if (internal.length && s.clusterIPs.length) {
    const list = dispatchable(s, inOrder(s, internal, 2 * p.index, addressOf)); // one target port: the address is the id
    clusterVerdict = sharedDispatch(s, p, list);
  }
  for (const cip of s.clusterIPs) {
    element(s, N.CLUSTER_IPS_SET, cip);
    element(s, internal.length ? N.SERVICE_IPS_MAP : N.NO_ENDPOINT_SERVICES_MAP, `${cip} . ${p.proto} . ${p.port}`, clusterVerdict, p.id);
  }
  return svcChain;
}

/** external IPs, LB IPs, node ports: their chain (ext-…) and elements, or their verdict when no endpoint serves them */
function renderExternal(s: ServiceRender, p: PortFacts, svcChain: string | undefined) {
  const { external } = p;
  if (p.hasExternalFrontend && (external.length || p.shortCircuit)) {
    const extChain = N.externalChain(p.id);
    const rules = externalPrelude(s, svcChain);
    s.out.chains.push({
      name: extChain,
      rules: [...rules, ...(external.length ? renderDispatch(s, p, extChain, external, 2 * p.index + 1) : [])],
    });
    for (const e of s.extIPs) element(s, N.SERVICE_IPS_MAP, `${e} . ${p.proto} . ${p.port}`, `goto ${extChain}`, p.id);
    if (p.nodePort) element(s, N.SERVICE_NODEPORTS_MAP, `${p.proto} . ${p.nodePort}`, `goto ${extChain}`, p.id);
  }
  if (!external.length) {
    const verdict = s.svc.ExternalTrafficToLocal ? "drop" : REJECT;
    for (const e of s.extIPs) element(s, N.NO_ENDPOINT_SERVICES_MAP, `${e} . ${p.proto} . ${p.port}`, verdict, p.id);
    if (p.nodePort) element(s, N.NO_ENDPOINT_NODEPORTS_MAP, `${p.proto} . ${p.nodePort}`, verdict, p.id);
  }
}

/** the rules an external chain starts with, before its dispatch */
function externalPrelude(s: ServiceRender, svcChain: string | undefined): RuleSpec[] {
  const rules: RuleSpec[] = [];
  if (!s.svc.ExternalTrafficToLocal)
    rules.push({ rule: `jump ${N.MARK_MASQ_CHAIN}`, comment: "masquerade traffic that may leave the node" });
  else if (svcChain) {
    // Pods and the node itself reach an eTP=Local service through the
    // cluster endpoints, as if they had gone out to the load balancer
    // and come back; the node is masqueraded, its source being an
    // address the endpoint could not answer.
    if (s.fc.local) rules.push({ rule: `${s.fc.local.is} goto ${svcChain}`, comment: "short-circuit pod traffic" });
    rules.push({ rule: `fib saddr type local jump ${N.MARK_MASQ_CHAIN}`, comment: "masquerade local traffic" });
    rules.push({ rule: `fib saddr type local goto ${svcChain}`, comment: "short-circuit local traffic" });
  }
  return rules;
}

/** rules that pick one of `targets` for the dispatch chain `chain`; `at`: its place in `lists` */
function renderDispatch(s: ServiceRender, p: PortFacts, chain: string, targets: Target[], at: number): RuleSpec[] {
  const { affinity, out, ip } = s;
  const list = dispatchable(s, inOrder(s, targets, at, affinity ? (t) => `goto ${endpointChainOf(p, t)}` : endpointKey));
  if (!affinity && list.length === 1) return [{ rule: `meta l4proto ${p.proto} dnat to ${endpointAddress(t0(list))}` }];
  if (affinity && list.length === 1) return [{ rule: `goto ${endpointChainOf(p, t0(list))}` }];
  const slot = s.slots(chain);
  if (slot === undefined) return []; // out of slots: no DNAT, the filter hooks reject
  if (!s.slotOf) out.slots = s.slotOf = new Map();
  s.slotOf.set(chain, slot);
  const base = slot * N.MAX_DISPATCH;
  const pick = `numgen random mod ${list.length} offset ${base}`;
  out.maps.push(shardMapSpec(s.fc.family, affinity ? "chains" : p.proto, slot));
  if (!affinity) {
    const map = N.endpointsMap(p.proto, slot);
    out.lists[at] = { set: map, owner: s.key, base, values: list.map(endpointKey) };
    return [{ rule: `meta l4proto ${p.proto} dnat ${ip} to ${pick} map @${map}` }];
  }
  const chains = N.endpointChainsMap(slot);
  out.lists[at] = { set: chains, owner: s.key, base, values: list.map((t) => `goto ${endpointChainOf(p, t)}`) };
  return [
    // sorted, not in position order: the chain reads the same whatever the history
    ...[...list].sort(byAddressAndPort).map((t) => ({ rule: `${ip} saddr @${affinitySetOf(p, t)} goto ${endpointChainOf(p, t)}` })),
    { rule: `${pick} vmap @${N.endpointChainsMap(slot)}` },
  ];
}

/** targets in the positions the previous render of list `at` gave them; `id` gives the element value of a target */
const inOrder = (s: ServiceRender, targets: Target[], at: number, id: (t: Target) => string): Target[] =>
  place(s.prev?.lists[at]?.values, targets, id, byAddressAndPort);

/** the first MAX_DISPATCH of a dispatch list (the rest counted in `truncated`), its local endpoints noted for hairpin */
function dispatchable(s: ServiceRender, all: Target[]): Target[] {
  const list = all.length > N.MAX_DISPATCH ? all.slice(0, N.MAX_DISPATCH) : all;
  if (all.length > list.length) s.out.truncated = (s.out.truncated ?? 0) + all.length - list.length;
  // Only a pod on this node can reach itself through this node's rules.
  for (const t of list) if (t.local) (s.hairpin ??= new Set()).add(t.ip);
  return list;
}

/** with ClientIP affinity: per endpoint, the set of its recent clients and the chain that updates it, then DNATs */
function renderAffinity(s: ServiceRender, p: PortFacts, affinity: number) {
  for (const t of [...p.targets].sort(byAddressAndPort)) {
    if (!t.internal && !t.external) continue;
    const set = affinitySetOf(p, t);
    s.out.sets.push({ name: set, type: addrType(s.fc.family), flags: ["dynamic", "timeout"], timeout: affinity });
    s.out.chains.push({
      name: endpointChainOf(p, t),
      rules: [{ rule: `update @${set} { ${s.ip} saddr }` }, { rule: `meta l4proto ${p.proto} dnat to ${endpointAddress(t)}` }],
    });
  }
}

/** the UDP frontends of the port with the endpoints each balances to (their stale conntrack entries are cleared) */
function renderUdpFrontends(s: ServiceRender, p: PortFacts) {
  const family = ipVersion(s.af);
  const extEps = [...new Set([...p.external, ...(p.shortCircuit ? p.internal : [])].map(endpointAddress))].sort();
  for (const cip of s.clusterIPs) s.out.udp.push({ ip: cip, family, port: p.port, endpoints: p.internal.map(endpointAddress) });
  for (const e of s.extIPs) s.out.udp.push({ ip: e, family, port: p.port, endpoints: extEps });
  if (p.nodePort) s.out.udp.push({ family, port: p.nodePort, endpoints: extEps });
}

// The sync keeps every service's objects, and most services have no sets,
// chains, slots or UDP ports of their own: one shared empty value for each
// instead of 5 empty containers per service (memory that grows with the
// services for nothing).
// Frozen, so a push into one fails loudly instead of reaching every service.
const NONE: never[] = Object.freeze([]) as never[];
const NO_SLOTS: ReadonlyMap<string, number> = new Map();

/** what a service has in a family it is not served in */
export const NOTHING: ServiceObjects = Object.freeze({
  sets: NONE,
  chains: NONE,
  elements: NONE,
  udp: NONE,
  slots: NO_SLOTS,
  maps: NONE,
  shared: NONE,
  lists: NONE,
});

/** the lists a render left empty, replaced by the shared empty one (`shared` and `slots` start shared) */
function compact(out: ServiceObjects): ServiceObjects {
  // one line each, not a loop over the names: once per service and family, in code a first sync runs cold
  if (!out.sets.length) out.sets = NONE;
  if (!out.chains.length) out.chains = NONE;
  if (!out.elements.length) out.elements = NONE;
  if (!out.udp.length) out.udp = NONE;
  if (!out.maps.length) out.maps = NONE;
  if (!out.lists.length) out.lists = NONE;
  return out;
}

/**
 * The targets of one scope (internal: cluster IPs; else node ports, external and LB IPs): `targets` itself
 * when all are (most services: every endpoint serves both), never changed after (the lists are only read).
 */
function inScope(targets: Target[], internal: boolean): Target[] {
  let i = 0;
  while (i < targets.length && (internal ? targets[i].internal : targets[i].external)) i++;
  if (i === targets.length) return targets;
  const out = targets.slice(0, i);
  for (; i < targets.length; i++) if (internal ? targets[i].internal : targets[i].external) out.push(targets[i]);
  return out;
}

/** whether all targets have the same target port */
function onePort(targets: Target[]): boolean {
  for (let i = 1; i < targets.length; i++) if (targets[i].port !== targets[0].port) return false;
  return true;
}

const t0 = <T>(list: T[]): T => list[0];

/**
 * One target per address and target port (unsorted: positions.ts sorts what it places). Duplicates are found by
 * a scan while the list is short (the usual handful of endpoints: cheaper
 * than a Map), by a Map keyed by the address string beyond.
 */
function targetsOf(port: PortMapping, { eps, addrs }: FamilyEndpoints): Target[] {
  const out: Target[] = [];
  const byAddr = eps.length > 16 ? new Map<string, Target>() : undefined;
  for (let i = 0; i < eps.length; i++) {
    const ep = eps[i];
    const addr = addrs[i];
    const tp = targetPort(ep, port);
    if (!isPort(tp)) continue;
    const local = ep.Local;
    const internal = !!ep.Scopes?.Internal;
    const external = !!ep.Scopes?.External;
    let t = byAddr?.get(addr);
    // rare: one address with several target ports
    if (!byAddr || (t && t.port !== tp)) {
      t = undefined;
      for (let j = 0; j < out.length; j++)
        if (out[j].ip === addr && out[j].port === tp) {
          t = out[j];
          break;
        }
    }
    if (!t) {
      t = { ip: addr, port: tp, internal, external, local, chain: undefined, affinitySet: undefined };
      out.push(t);
      if (byAddr && !byAddr.has(addr)) byAddr.set(addr, t);
      continue;
    }
    t.local ||= local;
    t.internal ||= internal;
    t.external ||= external;
  }
  return out;
}

const byAddressAndPort = (a: Target, b: Target) => (a.ip < b.ip ? -1 : a.ip > b.ip ? 1 : a.port - b.port);
const addressOf = (t: Target) => t.ip;
/** the value of a target's element in an endpoints map */
const endpointKey = (t: Target) => `${t.ip} . ${t.port}`;
const endpointAddress = (t: Target) => hostPort(t.ip, t.port);
// names are hashed: made once per target (a target belongs to one port), however many lists and rules name it
const endpointChainOf = (p: PortFacts, t: Target) => (t.chain ??= N.endpointChain(p.id, t.ip, t.port));
const affinitySetOf = (p: PortFacts, t: Target) => (t.affinitySet ??= N.affinitySet(p.id, t.ip, t.port));

/**
 * The elements that send a service port's cluster IPs through the shared
 * dispatch chain of its index and endpoint count (names.ts), all endpoints
 * having the same target port. Gives the verdict that goes to the chain.
 */
function sharedDispatch(s: ServiceRender, p: PortFacts, list: Target[]): string {
  const { out } = s;
  const { use, uses, verdict } = sharedUse(p.proto, p.index, list.length);
  // nearly every service uses one shared chain: that one-element list is shared too
  out.shared = out.shared.length ? [...out.shared, use] : uses;
  // the positions under each cluster IP (one per family: one here)
  out.lists[2 * p.index] = {
    set: N.clusterEndpointsMap(p.proto),
    owner: s.key,
    base: p.index * N.MAX_DISPATCH,
    ips: s.clusterIPs,
    values: list.map(addressOf),
  };
  for (const cip of s.clusterIPs)
    out.elements.push({ set: N.clusterTargetPortsMap(p.proto), key: `${cip} . ${p.port}`, value: String(list[0].port), owner: s.key });
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

interface Firewall {
  chain: string;
  targets: string[];
}

const NO_FIREWALLS: Firewall[] = NONE;

/** one firewall chain per IPFilter with targets in this family: drop sources outside its ranges */
function renderFirewalls(key: string, svc: Service, fc: FamilyConfig, out: ServiceObjects): Firewall[] {
  const f = fc.family;
  const fam = f === "ip" ? "V4" : "V6";
  if (!svc.IPFilters.length) return NO_FIREWALLS;
  const result: Firewall[] = [];
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
