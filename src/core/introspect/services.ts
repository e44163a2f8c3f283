// `kpng get`'s answer: the node-local state the brain holds for one node, per
// Service and port, with each endpoint's use in both scopes and why (explain.ts),
// and the revision each backend of this process last applied. Built on request
// from the brain's held objects: nothing here runs on the hot path.

import { create } from "@bufbuild/protobuf";
import {
  EndpointViewSchema,
  FrontendSchema,
  PortViewSchema,
  ServicesReplySchema,
  ServiceViewSchema,
  type BackendSync,
  type EndpointView,
  type Filter,
  type Frontend,
  type ServicesReply,
  type ServiceView,
} from "../../gen/introspectv1/introspect_pb.ts";
import { Protocol, type Service } from "../../gen/localv1/services_pb.ts";
import type { Brain } from "../brain/brain.ts";
import { affinityTimeoutSeconds, ipsOf, policyName } from "../brain/output.ts";
import { candidates } from "../brain/model/endpoints.ts";
import { healthCheckAddresses, hostAddresses } from "../node/healthcheck-ports.ts";
import { explainEndpoints, type ScopeUse } from "./explain.ts";

export interface ServicesOptions {
  brain: Brain;
  nodeName: string;
  /** kube-proxy's --nodeport-addresses (Config.nodePortAddresses) */
  nodePortAddresses: readonly string[];
  /** what each backend of this process holds (none in `kpng serve`) */
  backends: () => BackendSync[];
  /** this host's addresses, for --nodeport-addresses CIDRs (default: its interfaces) */
  hostAddresses?: () => string[];
}

/** whether `key` ("namespace/name") is asked for */
export function matches(filter: Pick<Filter, "namespace" | "name">, key: string): boolean {
  if (!filter.namespace) return !filter.name;
  return filter.name ? key === `${filter.namespace}/${filter.name}` : key.startsWith(`${filter.namespace}/`);
}

/** services per streamed message: a bounded piece of work between two turns of the event loop */
export const SERVICES_PER_MESSAGE = 100;

/** the keys `filter` asks for, sorted; one Service is looked up, not searched for */
function keysOf(services: ReadonlyMap<string, unknown>, filter: Filter): string[] {
  if (filter.namespace && filter.name) {
    const key = `${filter.namespace}/${filter.name}`;
    return services.has(key) ? [key] : [];
  }
  return [...services.keys()].filter((k) => matches(filter, k)).sort();
}

/**
 * GetServices' messages: the node's fields, then the services in pieces of
 * SERVICES_PER_MESSAGE, each made in its own turn of the event loop (10,000
 * services of 10 endpoints take seconds to explain and encode: the proxy's
 * syncs and watches go on meanwhile). Services and endpoints come from the
 * state of the first message; their reasons from the cluster objects the
 * brain holds when each piece is made.
 */
export async function* servicesReplies(opts: ServicesOptions, filter: Filter): AsyncGenerator<ServicesReply> {
  const { brain, nodeName } = opts;
  const state = brain.isSynced ? brain.view(nodeName).state : null;
  const nodeIPs = [...(state?.nodeIPs ?? [])];
  const npAddrs = healthCheckAddresses({
    nodePortAddresses: opts.nodePortAddresses,
    nodeIPs,
    hostAddresses: (opts.hostAddresses ?? hostAddresses)(),
  }).filter((a) => a !== "::");
  yield create(ServicesReplySchema, {
    nodeName,
    revision: BigInt(state?.rev ?? 0),
    backends: opts.backends(),
    nodeIps: nodeIPs,
    nodePortAddresses: npAddrs,
  });
  if (!state) return;
  const keys = keysOf(state.services, filter);
  for (let i = 0; i < keys.length; i += SERVICES_PER_MESSAGE) {
    if (i) await new Promise((resolve) => setImmediate(resolve));
    const services = keys
      .slice(i, i + SERVICES_PER_MESSAGE)
      .map((key) => serviceView(brain, nodeName, key, state.services.get(key)!.service, npAddrs));
    yield create(ServicesReplySchema, { services });
  }
}

function frontends(svc: Service, port: Service["Ports"][number], npAddrs: readonly string[]): Frontend[] {
  const f = (kind: string, ip: string, p: number, scope: string) => create(FrontendSchema, { kind, ip, port: p, scope });
  return [
    ...ipsOf(svc.IPs?.ClusterIPs).map((ip) => f("clusterIP", ip, port.Port, "internal")),
    ...(port.NodePort ? npAddrs.map((ip) => f("nodePort", ip, port.NodePort, "external")) : []),
    ...ipsOf(svc.IPs?.ExternalIPs).map((ip) => f("externalIP", ip, port.Port, "external")),
    ...ipsOf(svc.IPs?.LoadBalancerIPs).map((ip) => f("loadBalancerIP", ip, port.Port, "external")),
  ];
}

const scopeUse = (u: ScopeUse) => ({ used: u.used, reason: u.reason ?? "", message: u.message ?? "" });

function endpointViews(brain: Brain, nodeName: string, key: string, svc: Service): EndpointView[] {
  const entry = brain.entry(key);
  if (!entry) return [];
  const cands = candidates(brain.cluster.slices.get(key) ?? [], entry.families, nodeName);
  const explained = explainEndpoints(cands, {
    internalLocal: entry.internalLocal,
    externalLocal: entry.externalLocal,
    external: entry.external,
    node: brain.nodeInfo(nodeName),
  });
  return explained.map(({ candidate: c, internal, external }) =>
    create(EndpointViewSchema, {
      key: c.key,
      ip: c.ip,
      nodeName: c.ep.nodeName ?? "",
      zone: c.ep.zone ?? "",
      hostname: c.ep.hostname ?? "",
      ready: c.ready,
      serving: c.serving,
      terminating: c.terminating,
      local: c.local,
      internal: scopeUse(internal),
      external: scopeUse(external),
      ports: Object.fromEntries(svc.Ports.flatMap((p) => (c.ports.has(p.Name) ? [[p.Name, c.ports.get(p.Name)!]] : []))),
    }),
  );
}

function serviceView(brain: Brain, nodeName: string, key: string, svc: Service, npAddrs: readonly string[]): ServiceView {
  const entry = brain.entry(key);
  return create(ServiceViewSchema, {
    namespace: svc.Namespace,
    name: svc.Name,
    type: svc.Type,
    clusterIps: ipsOf(svc.IPs?.ClusterIPs),
    externalIps: ipsOf(svc.IPs?.ExternalIPs),
    loadBalancerIps: ipsOf(svc.IPs?.LoadBalancerIPs),
    sourceRanges: svc.IPFilters.flatMap((f) => f.SourceRanges),
    internalTrafficPolicy: policyName(svc.InternalTrafficToLocal),
    externalTrafficPolicy: policyName(svc.ExternalTrafficToLocal),
    affinityTimeoutSeconds: affinityTimeoutSeconds(svc),
    healthCheckNodePort: svc.HealthCheckNodePort,
    external: entry?.external ?? false,
    ports: svc.Ports.map((p) =>
      create(PortViewSchema, {
        name: p.Name,
        protocol: Protocol[p.Protocol],
        port: p.Port,
        nodePort: p.NodePort,
        frontends: frontends(svc, p, npAddrs),
      }),
    ),
    endpoints: endpointViews(brain, nodeName, key, svc),
  });
}
