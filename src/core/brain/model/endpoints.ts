// EndpointSlices -> the endpoints this node may use for one service, with
// their scopes. The rules follow upstream kube-proxy (CategorizeEndpoints):
// ready endpoints first, serving-and-terminating ones as a fallback when a
// traffic class has none ready; Local policy keeps only this node's
// endpoints; topology hints narrow Cluster-policy traffic. Each IP family is
// computed on its own.

import type { Endpoint, EndpointScopes, PortName, Service } from "../../../gen/localv1/services_pb.ts";
import { EndpointMap } from "../endpoint-map.ts";
import type { Family } from "../../net/ip.ts";
import type { K8sEndpointSlice } from "../k8s/objects.ts";
import { narrowByTopology, type Hints, type NodeInfo } from "./topology.ts";

export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";
export const HEADLESS_LABEL = "service.kubernetes.io/headless";

/** an endpoint of an EndpointSlice, as the index holds it */
type SliceEndpoint = NonNullable<K8sEndpointSlice["endpoints"]>[number];

/**
 * An endpoint this service may use, once de-duplicated. Its hostname, node,
 * zone and hints are read from the slice's endpoint itself (`ep`): at
 * start-up every endpoint of the cluster passes through here once, and a
 * copy of each of those fields would be work per endpoint for nothing.
 */
export interface Candidate {
  key: string;
  ep: SliceEndpoint;
  /** the endpoint's first address: upstream uses only that one */
  ip: string;
  family: Family;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  local: boolean;
  /** slice port name -> port */
  ports: ReadonlyMap<string, number>;
}

export interface ScopeOptions {
  internalLocal: boolean;
  externalLocal: boolean;
  /** whether external traffic (node ports, external and LB IPs) exists for this service */
  external: boolean;
  node: NodeInfo;
}

/** Stable key for an endpoint without a pod: a hash of its address (no `/`, safe in API paths). */
export const addressKey = (ip: string) => "ip-" + (Bun.SHA256.hash(ip, "hex") as string).slice(0, 16);

/** A slice is read only if it belongs to a service, is not headless, and carries IPs. */
export function sliceFamily(slice: K8sEndpointSlice): Family | null {
  const labels = slice.metadata.labels ?? {};
  if (!labels[SERVICE_NAME_LABEL] || HEADLESS_LABEL in labels) return null;
  return slice.addressType === "IPv4" ? "v4" : slice.addressType === "IPv6" ? "v6" : null;
}

/** up to this many candidates, IPs and keys are looked up by scanning; above, through a Map and a Set */
const SCAN = 16;
const NO_CONDITIONS: { ready?: boolean | null; serving?: boolean | null; terminating?: boolean | null } = Object.freeze({});

/** index in `cands` of the one with this IP; else -1, or -2 when one holds this key: one scan for both */
function scan(cands: readonly Candidate[], ip: string, key: string): number {
  let taken = false;
  for (let i = 0; i < cands.length; i++) {
    const c = cands[i];
    if (c.ip === ip) return i;
    if (c.key === key) taken = true;
  }
  return taken ? -2 : -1;
}

/** the ports of a slice by name (unnamed: ""), the ones without a number left out */
function slicePorts(slice: K8sEndpointSlice): Map<string, number> {
  const ports = new Map<string, number>();
  const list = slice.ports;
  if (list) for (let i = 0; i < list.length; i++) if (list[i].port) ports.set(list[i].name ?? "", list[i].port!);
  return ports;
}

/**
 * All endpoints of the given slices, de-duplicated by IP (the same endpoint
 * can sit in two slices while the controller moves it): a non-terminating
 * copy wins, ports are merged. Nearly every service has a few endpoints:
 * a scan of them finds an IP or a key faster than a Map and a Set made for
 * each of 10,000 services at start-up.
 */
export function candidates(slices: readonly K8sEndpointSlice[], families: ReadonlySet<Family>, nodeName: string): Candidate[] {
  const out: Candidate[] = [];
  /** made once `out` outgrows SCAN: IP -> index in out, and the keys out holds */
  let byIP: Map<string, number> | undefined;
  let keys: Set<string> | undefined;
  for (let s = 0; s < slices.length; s++) {
    const slice = slices[s];
    const family = sliceFamily(slice);
    const eps = slice.endpoints;
    if (!family || !families.has(family) || !eps?.length) continue;
    const ports = slicePorts(slice);
    // A pod has one IP per family: in a dual-stack service its v6 copy gets its own key so
    // both can coexist (a v6-only service keys by pod name alone: no string per endpoint).
    const podSuffix = family === "v6" && families.has("v4") ? ".v6" : "";
    for (let e = 0; e < eps.length; e++) {
      const ep = eps[e];
      const ip = ep.addresses[0]; // upstream uses only the first address
      const c = ep.conditions ?? NO_CONDITIONS;
      const pod = ep.pod;
      // Without a pod, the key is a hash of the IP, made once the IP is known to be new.
      let key = pod ? (podSuffix ? pod + podSuffix : pod) : "";
      const cand: Candidate = {
        key,
        ep,
        ip,
        family,
        ready: c.ready ?? true,
        serving: c.serving ?? true,
        terminating: c.terminating ?? false,
        local: nodeName !== "" && ep.nodeName === nodeName,
        ports,
      };
      const at = byIP ? (byIP.get(ip) ?? -1) : scan(out, ip, key);
      if (at >= 0) {
        const prev = out[at];
        const winner = prev.terminating && !cand.terminating ? cand : prev;
        const loser = winner === prev ? cand : prev;
        winner.ports = new Map([...loser.ports, ...winner.ports]);
        winner.key = prev.key;
        out[at] = winner;
        continue;
      }
      if (!key || (keys ? keys.has(key) : at === -2)) cand.key = key = addressKey(ip);
      out.push(cand);
      if (byIP && keys) {
        byIP.set(ip, out.length - 1);
        keys.add(key);
      } else if (out.length > SCAN) {
        byIP = new Map(out.map((x, i) => [x.ip, i]));
        keys = new Set(out.map((x) => x.key));
      }
    }
  }
  return out;
}

const isReady = (c: Candidate) => c.ready;
const isLocalReady = (c: Candidate) => c.local && c.ready;
const isFallback = (c: Candidate) => c.serving && c.terminating;
const isLocalFallback = (c: Candidate) => c.local && c.serving && c.terminating;

const hintsOf = (c: Candidate): Hints | undefined => c.ep.hints;

/**
 * Whether one traffic class may use an endpoint, per upstream's rules. A test
 * rather than a set: most classes take every ready endpoint, and a Set of
 * them each (100,000 endpoints at 10k services) cost more than the rest.
 * Loops rather than some() and every(): at start-up, in code not compiled
 * yet, a callback per endpoint costs more than the test it makes.
 */
export function usable(cands: readonly Candidate[], local: boolean, node: NodeInfo): (c: Candidate) => boolean {
  if (local) {
    for (let i = 0; i < cands.length; i++) if (isLocalReady(cands[i])) return isLocalReady;
    return isLocalFallback;
  }
  // nearly always all of them: no copy then
  let ready = cands;
  for (let i = 0; i < cands.length; i++) {
    if (!cands[i].ready) {
      ready = cands.filter(isReady);
      break;
    }
  }
  if (!ready.length) return isFallback; // terminating fallback: better a draining endpoint than a dropped connection
  const narrowed = narrowByTopology(ready, node, hintsOf);
  if (narrowed === ready) return isReady;
  const set = new Set(narrowed);
  return (c) => set.has(c);
}

const BOTH_FAMILIES = ["v4", "v6"] as const;
const ONLY: Record<Family, readonly Family[]> = { v4: ["v4"], v6: ["v6"] };

/** the families `cands` holds, in BOTH_FAMILIES' order (most services are single-stack: one look at each) */
function familiesOf(cands: readonly Candidate[]): readonly Family[] {
  if (!cands.length) return [];
  const first = cands[0].family;
  for (let i = 1; i < cands.length; i++) if (cands[i].family !== first) return BOTH_FAMILIES;
  return ONLY[first];
}

/**
 * Endpoints of one service with scopes, keyed by endpoint key; endpoints no
 * traffic may use are left out. An endpoint of `prev` (the last result for
 * this service) that would come out the same is reused as is: a change of
 * one slice of a 5,000-endpoint service creates its 100 endpoints, not 5,000.
 */
export function endpointsModel(
  service: Service,
  cands: readonly Candidate[],
  opts: ScopeOptions,
  prev?: ReadonlyMap<string, Endpoint>,
): EndpointMap {
  const keys: string[] = [];
  const eps: Endpoint[] = [];
  // The endpoints of one slice share its port map, hence one overrides list; they
  // come one after the other, so the list is remembered for the last port map
  // (and for the earlier ones in a Map, made only for a service of several).
  let ports: ReadonlyMap<string, number> | undefined;
  let overrides: PortName[] = [];
  let earlier: Map<ReadonlyMap<string, number>, PortName[]> | undefined;
  const families = familiesOf(cands);
  for (let f = 0; f < families.length; f++) {
    const family = families[f];
    const fam = families.length === 1 ? cands : cands.filter((x) => x.family === family);
    const internal = usable(fam, opts.internalLocal, opts.node);
    const external = opts.external ? usable(fam, opts.externalLocal, opts.node) : undefined;
    for (let n = 0; n < fam.length; n++) {
      const c = fam[n];
      const i = internal(c);
      const e = external?.(c) ?? false;
      if (!i && !e) continue;
      const old = prev?.get(c.key);
      keys.push(c.key); // distinct: candidates() gives every candidate its own key
      if (old && isEndpointOf(old, service, c, i, e)) {
        eps.push(old);
        continue;
      }
      if (c.ports !== ports) {
        if (ports) (earlier ??= new Map()).set(ports, overrides);
        ports = c.ports;
        overrides = earlier?.get(ports) ?? portOverrides(service, ports);
      }
      eps.push(toEndpoint(c, overrides, i, e));
    }
  }
  return new EndpointMap(keys, eps);
}

/** whether toEndpoint(service, c, internal, external) would equal `ep` (field by field, as toEndpoint fills them) */
function isEndpointOf(ep: Endpoint, service: Service, c: Candidate, internal: boolean, external: boolean): boolean {
  if (
    ep.Hostname !== (c.ep.hostname ?? "") ||
    ep.Local !== c.local ||
    ep.Terminating !== c.terminating ||
    ep.NodeName !== (c.ep.nodeName ?? "") ||
    ep.Zone !== (c.ep.zone ?? "")
  )
    return false;
  if (ep.Scopes?.Internal !== internal || ep.Scopes.External !== external) return false;
  const [own, other] = c.family === "v4" ? [ep.IPs?.V4, ep.IPs?.V6] : [ep.IPs?.V6, ep.IPs?.V4];
  if (own?.length !== 1 || own[0] !== c.ip || other?.length !== 0) return false;
  let n = 0;
  for (const p of service.Ports) {
    const port = c.ports.get(p.Name);
    if (port === undefined) continue;
    const o = ep.PortOverrides[n++];
    if (o?.Name !== p.Name || o.Port !== port) return false;
  }
  return n === ep.PortOverrides.length;
}

// Parts equal across endpoints are shared between them (100,000 endpoints at
// 10k services): a published state is never mutated. The few process-wide
// ones are frozen to make sure of it; the per-slice override lists are not
// (JSC turns a frozen array into a slower, bigger sparse one).
const NO_IPS: string[] = Object.freeze([]) as never;
const SCOPES: readonly EndpointScopes[] = [0, 1, 2, 3].map((i) =>
  Object.freeze({ $typeName: "localv1.EndpointScopes" as const, Internal: i >= 2, External: i % 2 === 1 }),
);

/** kpng backends resolve target ports by service port name, so every service port the slice serves gets an override. */
function portOverrides(service: Service, ports: ReadonlyMap<string, number>): PortName[] {
  const out: PortName[] = [];
  for (const p of service.Ports) {
    const port = ports.get(p.Name);
    if (port !== undefined) out.push(Object.freeze({ $typeName: "localv1.PortName" as const, Name: p.Name, Port: port }));
  }
  return out;
}

// The brain keeps an Endpoint per endpoint of its node state (100,000 at 10k
// services), each with its IPSet. Built by these classes, a message holds
// its fields and finds $typeName on its prototype, where protobuf-es looks
// for it too (`"$typeName" in m`): eight own fields fit JSC's 80-byte cells,
// where the nine of an object literal took its 112-byte ones (an IPSet: 32
// bytes, not 48). A test comparing one with create()'s output compares them
// as messages (clone).
class EndpointMsg {
  declare readonly $typeName: "localv1.Endpoint";
  constructor(
    public Hostname: string,
    public IPs: IPSetMsg,
    public Local: boolean,
    public PortOverrides: PortName[],
    public Scopes: EndpointScopes,
    public Terminating: boolean,
    public NodeName: string,
    public Zone: string,
  ) {}
}
Object.defineProperty(EndpointMsg.prototype, "$typeName", { value: "localv1.Endpoint", enumerable: true });

class IPSetMsg {
  declare readonly $typeName: "localv1.IPSet";
  constructor(
    public V4: string[],
    public V6: string[],
  ) {}
}
Object.defineProperty(IPSetMsg.prototype, "$typeName", { value: "localv1.IPSet", enumerable: true });

/** A localv1.Endpoint, field for field what `create(EndpointSchema, …)` makes ($typeName on the prototype), with shared parts. */
function toEndpoint(c: Candidate, overrides: PortName[], internal: boolean, external: boolean): Endpoint {
  const ep = c.ep;
  // the slice's own address list when it holds only that address (shared, never mutated)
  const own = ep.addresses.length === 1 ? ep.addresses : [c.ip];
  const ips = new IPSetMsg(c.family === "v4" ? own : NO_IPS, c.family === "v6" ? own : NO_IPS);
  return new EndpointMsg(
    ep.hostname ?? "",
    ips,
    c.local,
    overrides,
    SCOPES[(internal ? 2 : 0) + (external ? 1 : 0)],
    c.terminating,
    ep.nodeName ?? "",
    ep.zone ?? "",
  ) as Endpoint;
}

/**
 * Endpoint equality without reflection: protobuf's `equals` walks the schema
 * for every field, of every endpoint of a service, on every change of one of
 * its slices (see docs/results/2026-11.md). ENDPOINT_FIELDS lists what is
 * compared; a test fails when the schema gains a field this does not know.
 */
export function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  if (a === b) return true;
  if (a.Hostname !== b.Hostname || a.Local !== b.Local || a.Terminating !== b.Terminating || a.NodeName !== b.NodeName || a.Zone !== b.Zone)
    return false;
  if (!!a.Scopes?.Internal !== !!b.Scopes?.Internal || !!a.Scopes?.External !== !!b.Scopes?.External || !a.Scopes !== !b.Scopes)
    return false;
  if (!sameList(a.IPs?.V4, b.IPs?.V4) || !sameList(a.IPs?.V6, b.IPs?.V6) || !a.IPs !== !b.IPs) return false;
  const [p, q] = [a.PortOverrides, b.PortOverrides];
  if (p.length !== q.length) return false;
  for (let i = 0; i < p.length; i++) if (p[i].Name !== q[i].Name || p[i].Port !== q[i].Port) return false;
  return true;
}

/** the Endpoint fields (and nested message fields) sameEndpoint compares */
export const ENDPOINT_FIELDS = [
  "Hostname",
  "IPs.V4",
  "IPs.V6",
  "Local",
  "PortOverrides.Name",
  "PortOverrides.Port",
  "Scopes.Internal",
  "Scopes.External",
  "Terminating",
  "NodeName",
  "Zone",
];

function sameList(a: readonly string[] = [], b: readonly string[] = []): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
