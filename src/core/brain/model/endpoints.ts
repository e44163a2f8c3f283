// EndpointSlices -> the endpoints this node may use for one service, with
// their scopes. The rules follow upstream kube-proxy (CategorizeEndpoints):
// ready endpoints first, serving-and-terminating ones as a fallback when a
// traffic class has none ready; Local policy keeps only this node's
// endpoints; topology hints narrow Cluster-policy traffic. Each IP family is
// computed on its own.

import { createHash } from "node:crypto";
import type { Endpoint, EndpointScopes, PortName, Service } from "../../../gen/localv1/services_pb.ts";
import { EndpointMap } from "../endpoint-map.ts";
import type { Family } from "../k8s/ip.ts";
import type { K8sEndpointSlice } from "../k8s/objects.ts";
import { narrowByTopology, type Hinted, type NodeInfo } from "./topology.ts";

export const SERVICE_NAME_LABEL = "kubernetes.io/service-name";
export const HEADLESS_LABEL = "service.kubernetes.io/headless";

export interface Candidate extends Hinted {
  key: string;
  ip: string;
  /** `[ip]`: the slice's own address list when it holds only that (shared, never mutated) */
  ips: readonly string[];
  family: Family;
  hostname: string;
  nodeName: string;
  zone: string;
  ready: boolean;
  serving: boolean;
  terminating: boolean;
  local: boolean;
  /** slice port name -> port */
  ports: Map<string, number>;
}

export interface ScopeOptions {
  internalLocal: boolean;
  externalLocal: boolean;
  /** whether external traffic (node ports, external and LB IPs) exists for this service */
  external: boolean;
  node: NodeInfo;
}

/** Stable key for an endpoint without a pod: a hash of its address (no `/`, safe in API paths). */
export const addressKey = (ip: string) => "ip-" + createHash("sha256").update(ip).digest("hex").slice(0, 16);

/** A slice is read only if it belongs to a service, is not headless, and carries IPs. */
export function sliceFamily(slice: K8sEndpointSlice): Family | null {
  const labels = slice.metadata.labels ?? {};
  if (!labels[SERVICE_NAME_LABEL] || HEADLESS_LABEL in labels) return null;
  return slice.addressType === "IPv4" ? "v4" : slice.addressType === "IPv6" ? "v6" : null;
}

/**
 * All endpoints of the given slices, de-duplicated by IP (the same endpoint
 * can sit in two slices while the controller moves it): a non-terminating
 * copy wins, ports are merged.
 */
export function candidates(slices: Iterable<K8sEndpointSlice>, families: ReadonlySet<Family>, nodeName: string): Candidate[] {
  const byIP = new Map<string, Candidate>();
  const keys = new Set<string>();
  for (const slice of slices) {
    const family = sliceFamily(slice);
    if (!family || !families.has(family)) continue;
    const ports = new Map<string, number>();
    for (const p of slice.ports ?? []) if (p.port) ports.set(p.name ?? "", p.port);
    for (const ep of slice.endpoints ?? []) {
      const ip = ep.addresses[0]; // upstream uses only the first address
      const c = ep.conditions ?? {};
      const cand: Candidate = {
        key: "",
        ip,
        ips: ep.addresses.length === 1 ? ep.addresses : [ip],
        family,
        hostname: ep.hostname ?? "",
        nodeName: ep.nodeName ?? "",
        zone: ep.zone ?? "",
        ready: c.ready ?? true,
        serving: c.serving ?? true,
        terminating: c.terminating ?? false,
        local: !!ep.nodeName && ep.nodeName === nodeName,
        ports,
        forNodes: ep.hints?.forNodes?.map((h) => h.name),
        forZones: ep.hints?.forZones?.map((h) => h.name),
      };
      const prev = byIP.get(ip);
      if (prev) {
        const winner = prev.terminating && !cand.terminating ? cand : prev;
        const loser = winner === prev ? cand : prev;
        winner.ports = new Map([...loser.ports, ...winner.ports]);
        winner.key = prev.key;
        byIP.set(ip, winner);
        continue;
      }
      const pod = ep.pod ?? "";
      // A pod has one IP per family: in a dual-stack service its v6 copy gets its own key so
      // both can coexist (a v6-only service keys by pod name alone: no string per endpoint).
      let key = pod ? (family === "v6" && families.has("v4") ? `${pod}.v6` : pod) : addressKey(ip);
      if (keys.has(key)) key = addressKey(ip);
      keys.add(key);
      cand.key = key;
      byIP.set(ip, cand);
    }
  }
  return [...byIP.values()];
}

/** The endpoints one traffic class may use, per upstream's rules. */
export function usable(cands: readonly Candidate[], local: boolean, node: NodeInfo): ReadonlySet<Candidate> {
  const pool = local ? cands.filter((c) => c.local) : cands;
  const ready = pool.filter((c) => c.ready);
  if (ready.length) return new Set(local ? ready : narrowByTopology(ready, node));
  // Terminating fallback: better a draining endpoint than a dropped connection.
  return new Set(pool.filter((c) => c.serving && c.terminating));
}

/**
 * Endpoints of one service with scopes, keyed by endpoint key; endpoints no
 * traffic may use are left out. An endpoint of `prev` (the last result for
 * this service) that would come out the same is reused as is: a change of
 * one slice of a 5,000-endpoint service creates its 100 endpoints, not 5,000.
 */
export function endpointsModel(service: Service, cands: readonly Candidate[], opts: ScopeOptions, prev?: ReadonlyMap<string, Endpoint>): EndpointMap {
  const keys: string[] = [];
  const eps: Endpoint[] = [];
  // The endpoints of one slice share its port map, hence one overrides list.
  const overrides = new Map<ReadonlyMap<string, number>, PortName[]>();
  const overridesOf = (ports: ReadonlyMap<string, number>) => {
    let o = overrides.get(ports);
    if (!o) overrides.set(ports, (o = portOverrides(service, ports)));
    return o;
  };
  for (const family of ["v4", "v6"] as const) {
    const fam = cands.filter((c) => c.family === family);
    if (!fam.length) continue;
    const internal = usable(fam, opts.internalLocal, opts.node);
    const external = opts.external ? usable(fam, opts.externalLocal, opts.node) : new Set<Candidate>();
    for (const c of fam) {
      if (!internal.has(c) && !external.has(c)) continue;
      const [i, e] = [internal.has(c), external.has(c)];
      const old = prev?.get(c.key);
      keys.push(c.key); // distinct: candidates() gives every candidate its own key
      eps.push(old && isEndpointOf(old, service, c, i, e) ? old : toEndpoint(c, overridesOf(c.ports), i, e));
    }
  }
  return new EndpointMap(keys, eps);
}

/** whether toEndpoint(service, c, internal, external) would equal `ep` (field by field, as toEndpoint fills them) */
function isEndpointOf(ep: Endpoint, service: Service, c: Candidate, internal: boolean, external: boolean): boolean {
  if (ep.Hostname !== c.hostname || ep.Local !== c.local || ep.Terminating !== c.terminating || ep.NodeName !== c.nodeName || ep.Zone !== c.zone) return false;
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
const SCOPES: readonly EndpointScopes[] = [0, 1, 2, 3].map((i) => Object.freeze({ $typeName: "localv1.EndpointScopes" as const, Internal: i >= 2, External: i % 2 === 1 }));

/** kpng backends resolve target ports by service port name, so every service port the slice serves gets an override. */
function portOverrides(service: Service, ports: ReadonlyMap<string, number>): PortName[] {
  const out: PortName[] = [];
  for (const p of service.Ports) {
    const port = ports.get(p.Name);
    if (port !== undefined) out.push(Object.freeze({ $typeName: "localv1.PortName" as const, Name: p.Name, Port: port }));
  }
  return out;
}

/** A localv1.Endpoint, field for field what `create(EndpointSchema, …)` makes, with shared parts. */
function toEndpoint(c: Candidate, overrides: PortName[], internal: boolean, external: boolean): Endpoint {
  return {
    $typeName: "localv1.Endpoint",
    Hostname: c.hostname,
    IPs: { $typeName: "localv1.IPSet", V4: c.family === "v4" ? (c.ips as string[]) : NO_IPS, V6: c.family === "v6" ? (c.ips as string[]) : NO_IPS },
    Local: c.local,
    PortOverrides: overrides,
    Scopes: SCOPES[(internal ? 2 : 0) + (external ? 1 : 0)],
    Terminating: c.terminating,
    NodeName: c.nodeName,
    Zone: c.zone,
  };
}

/**
 * Endpoint equality without reflection: protobuf's `equals` walks the schema
 * for every field (~1.5 µs an endpoint, 7 ms for a 5,000-endpoint service on
 * every change of one of its slices). ENDPOINT_FIELDS lists what is
 * compared; a test fails when the schema gains a field this does not know.
 */
export function sameEndpoint(a: Endpoint, b: Endpoint): boolean {
  if (a === b) return true;
  if (a.Hostname !== b.Hostname || a.Local !== b.Local || a.Terminating !== b.Terminating || a.NodeName !== b.NodeName || a.Zone !== b.Zone) return false;
  if (!!a.Scopes?.Internal !== !!b.Scopes?.Internal || !!a.Scopes?.External !== !!b.Scopes?.External || !a.Scopes !== !b.Scopes) return false;
  if (!sameList(a.IPs?.V4, b.IPs?.V4) || !sameList(a.IPs?.V6, b.IPs?.V6) || !a.IPs !== !b.IPs) return false;
  const [p, q] = [a.PortOverrides, b.PortOverrides];
  if (p.length !== q.length) return false;
  for (let i = 0; i < p.length; i++) if (p[i].Name !== q[i].Name || p[i].Port !== q[i].Port) return false;
  return true;
}

/** the Endpoint fields (and nested message fields) sameEndpoint compares */
export const ENDPOINT_FIELDS = ["Hostname", "IPs.V4", "IPs.V6", "Local", "PortOverrides.Name", "PortOverrides.Port", "Scopes.Internal", "Scopes.External", "Terminating", "NodeName", "Zone"];

function sameList(a: readonly string[] = [], b: readonly string[] = []): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
