// Service -> localv1.Service: which services this proxy serves and the
// node-independent half of their model (IPs per family, ports, policies,
// affinity, source ranges).

import { Protocol, type IPSet, type Service } from "../../../gen/localv1/services_pb.ts";
import { byFamily } from "../k8s/ip.ts";
import type { K8sService } from "../k8s/objects.ts";

export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";
/** kube-proxy's default when sessionAffinityConfig gives no timeout (3 hours). */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
/** Huge and useless to a dataplane; every `kubectl apply` rewrites it. */
const DROPPED_ANNOTATIONS = new Set(["kubectl.kubernetes.io/last-applied-configuration"]);

export const protocolOf = (p: "TCP" | "UDP" | "SCTP"): Protocol => Protocol[p];

/**
 * Whether this proxy serves the service at all: ExternalName and headless
 * services have nothing to proxy; a service naming another proxy through the
 * service-proxy-name label belongs to that proxy (kube-proxy's label selector).
 */
export function isProxied(svc: K8sService, serviceProxyName: string): boolean {
  const spec = svc.spec;
  if (spec.type === "ExternalName") return false;
  if (spec.clusterIP === "None" || spec.clusterIPs?.[0] === "None") return false;
  if (!spec.clusterIP && !spec.clusterIPs?.length) return false; // no IP allocated yet
  const owner = svc.metadata.labels?.[SERVICE_PROXY_NAME_LABEL];
  return owner === undefined || (serviceProxyName !== "" && owner === serviceProxyName);
}

/** Traffic to node ports, external IPs and LB IPs exists only for these (upstream `ExternallyAccessible`). */
const externallyAccessible = (svc: K8sService) =>
  svc.spec.type === "NodePort" || svc.spec.type === "LoadBalancer" || (svc.spec.externalIPs?.length ?? 0) > 0;

export const externalPolicyLocal = (svc: K8sService) => externallyAccessible(svc) && svc.spec.externalTrafficPolicy === "Local";
export const internalPolicyLocal = (svc: K8sService) => svc.spec.internalTrafficPolicy === "Local";

function clusterIPs(svc: K8sService): string[] {
  const ips = svc.spec.clusterIPs?.length ? svc.spec.clusterIPs : svc.spec.clusterIP ? [svc.spec.clusterIP] : [];
  const families = svc.spec.ipFamilies;
  // ipFamilies names the families the service serves; an IP of another family is stale.
  return ips.filter((ip) => !families?.length || families.includes(ip.includes(":") ? "IPv6" : "IPv4"));
}

function loadBalancerIPs(svc: K8sService): string[] {
  if (svc.spec.type !== "LoadBalancer") return [];
  // ipMode Proxy: the load balancer proxies itself, so traffic must reach it
  // rather than be short-circuited to endpoints on the node (KEP-1860).
  return (svc.status?.loadBalancer?.ingress ?? []).filter((i) => i.ip && i.ipMode !== "Proxy").map((i) => i.ip!);
}

// The messages are written as object literals, field for field what
// protobuf-es's `create()` makes (proto3: every field set, $typeName first,
// fields in declaration order; test/brain/service.test.ts compares them):
// create() walks the schema for each, ~1.4 µs a Service at start-up.
//
// Most services have no external or LB IPs, filters or affinity: those parts are
// one shared, frozen object each (a published model is never mutated).
const NO_IPS: IPSet = Object.freeze({ $typeName: "localv1.IPSet", V4: Object.freeze([]) as never, V6: Object.freeze([]) as never });
const NO_FILTERS = Object.freeze([]) as never as Service["IPFilters"];
const NO_AFFINITY = Object.freeze({ case: undefined }) as Service["SessionAffinity"];

function setOf(ips: string[]): IPSet {
  if (!ips.length) return NO_IPS;
  const { V4, V6 } = byFamily(ips);
  return { $typeName: "localv1.IPSet", V4, V6 };
}

export function serviceModel(svc: K8sService): Service {
  const spec = svc.spec;
  const withNodePorts = spec.type === "NodePort" || spec.type === "LoadBalancer";
  const lbIPs = loadBalancerIPs(svc);
  const ranges = spec.loadBalancerSourceRanges ?? [];
  // The index's own maps, not copies (neither side is ever mutated), unless one must go.
  const given = svc.metadata.annotations ?? {};
  let drop = false;
  for (const k of DROPPED_ANNOTATIONS) if (Object.hasOwn(given, k)) drop = true;
  const annotations = drop ? Object.fromEntries(Object.entries(given).filter(([k]) => !DROPPED_ANNOTATIONS.has(k))) : given;
  const eLocal = externalPolicyLocal(svc);
  return {
    $typeName: "localv1.Service",
    Namespace: svc.metadata.namespace ?? "",
    Name: svc.metadata.name,
    Type: spec.type,
    IPs: { $typeName: "localv1.ServiceIPs", ClusterIPs: setOf(clusterIPs(svc)), ExternalIPs: setOf(spec.externalIPs ?? []), Headless: false, LoadBalancerIPs: setOf(lbIPs) },
    MapIP: false,
    Ports: (spec.ports ?? []).map((p) => ({
      $typeName: "localv1.PortMapping",
      Name: p.name ?? "",
      Protocol: protocolOf(p.protocol),
      Port: p.port,
      NodePort: withNodePorts ? (p.nodePort ?? 0) : 0,
      TargetPort: typeof p.targetPort === "number" ? p.targetPort : p.targetPort === undefined ? p.port : 0,
      TargetPortName: typeof p.targetPort === "string" ? p.targetPort : "",
    })),
    ExternalTrafficToLocal: eLocal,
    Labels: svc.metadata.labels ?? {},
    Annotations: annotations,
    IPFilters: lbIPs.length && ranges.length ? [{ $typeName: "localv1.IPFilter", TargetIPs: setOf(lbIPs), SourceRanges: [...ranges] }] : NO_FILTERS,
    SessionAffinity:
      spec.sessionAffinity === "ClientIP"
        ? { case: "ClientIP", value: { $typeName: "localv1.ClientIPAffinity", TimeoutSeconds: spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_AFFINITY_TIMEOUT_SECONDS } }
        : NO_AFFINITY,
    InternalTrafficToLocal: internalPolicyLocal(svc),
    HealthCheckNodePort: spec.type === "LoadBalancer" && eLocal ? (spec.healthCheckNodePort ?? 0) : 0,
  };
}
