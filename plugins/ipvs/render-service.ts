// Pure: one service and its endpoints -> what IPVS mode programs for it.
//
// Per service port and family (kube-proxy's IPVS mode, pkg/proxy/ipvs/proxier.go):
//   - a virtual server per cluster IP, external IP, LB ingress IP (bound to
//     kube-ipvs0) and per node address for the node port (not bound: the
//     address is the node's own);
//   - real servers = endpoints of the matching scope: Scopes.Internal for
//     cluster IPs, Scopes.External for everything else (the brain already
//     applied traffic policies, topology and terminating fallback);
//   - ipset entries driving the few iptables rules: masquerade classes, source
//     ranges, hairpin, and REJECT / DROP for destinations without endpoints.

import {
  affinitySeconds,
  cidrsOf,
  type Endpoint,
  type Family,
  familyOf,
  ipsOf,
  type PortMapping,
  protocolName,
  type Service,
  type ServiceEndpoints,
  targetPort,
} from "../../src/host/toolkit/index.ts";
import { type SetId, setName } from "./names.ts";
import { type Proto, type RealServer, type ServiceModel, type VirtualServer, entryKey, rsKey, vsKey } from "./model.ts";

export interface RenderContext {
  /** IPVS scheduler (Config.ipvs.scheduler, "rr" when empty) */
  scheduler: string;
  /** families this node proxies */
  families: ReadonlySet<Family>;
  /** addresses node ports answer on (from Config.nodePortAddresses / Config.nodeIPs) */
  nodePortIPs: readonly string[];
}

/** endpoints of a scope as real servers, and the addresses of those on this node */
interface RealServers {
  reals: Map<string, RealServer>;
  local: Set<string>;
}

function realServers(eps: readonly Endpoint[], scope: "Internal" | "External", family: Family, pm: PortMapping): RealServers {
  const reals = new Map<string, RealServer>();
  const local = new Set<string>();
  for (const ep of eps) {
    if (!ep.Scopes?.[scope]) continue;
    const ip = ipsOf(ep.IPs, family)[0];
    if (!ip) continue;
    const rs = { ip, port: targetPort(ep, pm), weight: 1 };
    reals.set(rsKey(rs), rs);
    if (ep.Local) local.add(ip);
  }
  return { reals, local };
}

/**
 * ipset's hash:net types refuse /0: split it into two halves, as upstream
 * does. Host routes are written the way `ipset save` prints them (no /32,
 * /128) so a full sync's re-read compares equal.
 */
function setCIDRs(cidr: string): string[] {
  if (cidr === "0.0.0.0/0") return ["0.0.0.0/1", "128.0.0.0/1"];
  if (cidr === "::/0") return ["::/1", "8000::/1"];
  const host = cidr.includes(":") ? "/128" : "/32";
  return [cidr.endsWith(host) ? cidr.slice(0, -host.length) : cidr];
}

/** one service port in one family: what its objects are made of, and the model they go to */
interface PortRender {
  model: ServiceModel;
  svc: Service;
  pm: PortMapping;
  family: Family;
  proto: Proto;
  scheduler: string;
  persistence: number | undefined;
  internal: RealServers;
  external: RealServers;
}

export function renderService(se: ServiceEndpoints, ctx: RenderContext): ServiceModel {
  const svc = se.service;
  const model: ServiceModel = { virtualServices: new Map(), addresses: new Set(), entries: new Set() };
  const eps = [...se.endpoints.values()];
  const persistence = affinitySeconds(svc);
  const scheduler = ctx.scheduler || "rr";

  for (const pm of svc.Ports) {
    const proto = protocolName(pm.Protocol);
    if (!proto) continue;
    for (const family of ctx.families) {
      const internal = realServers(eps, "Internal", family, pm);
      const external = realServers(eps, "External", family, pm);
      const r: PortRender = { model, svc, pm, family, proto, scheduler, persistence, internal, external };
      renderFrontends(r, ctx.nodePortIPs);
      renderSourceRanges(r);
      renderLoopBack(r);
    }
  }
  return model;
}

function entry(r: PortRender, id: SetId, value: string) {
  r.model.entries.add(entryKey(setName(id, r.family), value));
}

/** a virtual server for each address the port answers on, with the ipset entries of its destination */
function renderFrontends(r: PortRender, nodePortIPs: readonly string[]) {
  const { svc, pm, family, model, internal, external } = r;
  const eLocal = svc.ExternalTrafficToLocal;
  for (const ip of ipsOf(svc.IPs?.ClusterIPs, family)) {
    model.addresses.add(ip);
    frontend(r, ip, pm.Port, internal.reals, { masq: "clusterIP", local: svc.InternalTrafficToLocal });
  }
  for (const ip of ipsOf(svc.IPs?.ExternalIPs, family)) {
    model.addresses.add(ip);
    // eTP=Local keeps the client source: no masquerade.
    frontend(r, ip, pm.Port, external.reals, { masq: eLocal ? undefined : "externalIP", local: eLocal });
  }
  for (const ip of ipsOf(svc.IPs?.LoadBalancerIPs, family)) {
    model.addresses.add(ip);
    frontend(r, ip, pm.Port, external.reals, { masq: eLocal ? undefined : "loadBalancer", local: eLocal });
  }
  if (pm.NodePort) {
    for (const ip of nodePortIPs) {
      if (familyOf(ip) === family) frontend(r, ip, pm.NodePort, external.reals, { masq: eLocal ? undefined : "nodePort", local: eLocal });
    }
  }
}

function frontend(r: PortRender, ip: string, port: number, reals: Map<string, RealServer>, o: { masq?: SetId; local: boolean }) {
  const { proto, scheduler, persistence } = r;
  const vs: VirtualServer = { proto, ip, port, scheduler, ...(persistence ? { persistence } : {}) };
  r.model.virtualServices.set(vsKey(vs), { vs, reals: new Map(reals) });
  const dst = `${ip},${proto}:${port}`;
  if (o.masq) entry(r, o.masq, dst);
  // No endpoint: kube-proxy REJECTs under a Cluster policy and DROPs under a
  // Local one (a Local policy must not tell clients the service is absent).
  if (reals.size === 0) entry(r, o.local ? "drop" : "reject", dst);
}

/** loadBalancerSourceRanges: the guarded destinations and the sources let in */
function renderSourceRanges(r: PortRender) {
  for (const filter of r.svc.IPFilters) {
    // Ranges of the other family do not restrict this one (upstream filters them per family).
    const ranges = cidrsOf(filter.SourceRanges, r.family).flatMap(setCIDRs);
    if (!ranges.length) continue;
    for (const ip of ipsOf(filter.TargetIPs, r.family)) {
      const dst = `${ip},${r.proto}:${r.pm.Port}`;
      entry(r, "loadBalancerFW", dst);
      for (const cidr of ranges) entry(r, "loadBalancerSourceCIDR", `${dst},${cidr}`);
    }
  }
}

// A local pod balanced to itself needs masquerade or its reply bypasses IPVS.
function renderLoopBack(r: PortRender) {
  for (const { reals, local } of [r.internal, r.external]) {
    if (!local.size) continue;
    for (const rs of reals.values()) if (local.has(rs.ip)) entry(r, "loopBack", `${rs.ip},${r.proto}:${rs.port},${rs.ip}`);
  }
}
