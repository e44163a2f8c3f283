// Service -> localv1.Service: which services this proxy serves and the
// node-independent half of their model (IPs per family, ports, policies,
// affinity, source ranges).

import type { IPSet, Service } from "../../../gen/localv1/services_pb.ts";
import { Protocol } from "../../protocol.ts";
import { byFamily } from "../../net/ip.ts";
import type { K8sService } from "../k8s/objects.ts";
import { clusterIPsByFamily } from "../k8s/read.ts";

export const SERVICE_PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name";
/** kube-proxy's default when sessionAffinityConfig gives no timeout (3 hours). */
export const DEFAULT_AFFINITY_TIMEOUT_SECONDS = 10800;
/** Huge and useless to a dataplane; every `kubectl apply` rewrites it. */
const DROPPED_ANNOTATIONS: readonly string[] = ["kubectl.kubernetes.io/last-applied-configuration"];

/** read.ts leaves only TCP, UDP and SCTP ports */
export const protocolOf = (p: string): Protocol => Protocol[p as "TCP" | "UDP" | "SCTP"] ?? Protocol.UnknownProtocol;

/**
 * Whether this proxy serves the service at all: ExternalName and headless
 * services have nothing to proxy; a service naming another proxy through the
 * service-proxy-name label belongs to that proxy (kube-proxy's label selector).
 */
export function isProxied(svc: K8sService, serviceProxyName: string, clusterIPs?: readonly string[]): boolean {
  const spec = svc.spec;
  if (spec.type === "ExternalName") return false;
  if (spec.clusterIP === "None" || spec.clusterIPs?.[0] === "None") return false;
  if (!spec.clusterIP && !spec.clusterIPs?.length) return false; // no IP allocated yet
  if (!(clusterIPs ?? clusterIPsByFamily(spec)).length) return false; // kube-proxy finds no cluster IP of either family
  const owner = svc.metadata.labels?.[SERVICE_PROXY_NAME_LABEL];
  return owner === undefined || (serviceProxyName !== "" && owner === serviceProxyName);
}

/** Whether externalTrafficPolicy applies (upstream pkg/api/v1/service `ExternallyAccessible`: by type; a type it does not know is not). */
const externallyAccessible = (svc: K8sService) =>
  svc.spec.type === "NodePort" ||
  svc.spec.type === "LoadBalancer" ||
  (svc.spec.type === "ClusterIP" && (svc.spec.externalIPs?.length ?? 0) > 0);

export const externalPolicyLocal = (svc: K8sService) => externallyAccessible(svc) && svc.spec.externalTrafficPolicy === "Local";
export const internalPolicyLocal = (svc: K8sService) => svc.spec.internalTrafficPolicy === "Local";

/**
 * Node ports and load-balancer IPs are read for these types only: kube-proxy
 * reads them whatever the type, and kpng keeps them off a ClusterIP service
 * that was a LoadBalancer once. A type kube-proxy does not know gets them as
 * kube-proxy gives them.
 */
const hasNodePortsAndLB = (type: string) => type !== "ClusterIP" && type !== "ExternalName";

function loadBalancerIPs(svc: K8sService): string[] {
  if (svc.spec.type === "NodePort" || !hasNodePortsAndLB(svc.spec.type)) return [];
  // Only VIP-mode ingress (ipMode absent or VIP): with Proxy, or a mode
  // kube-proxy does not know, the load balancer proxies itself, so traffic
  // must reach it rather than be short-circuited to endpoints on the node
  // (KEP-1860, upstream IsVIPMode).
  const out: string[] = [];
  for (const i of svc.status?.loadBalancer?.ingress ?? []) if (i.ip && (i.ipMode === undefined || i.ipMode === "VIP")) out.push(i.ip);
  return out;
}

// The messages are written as object literals, field for field what
// protobuf-es's `create()` makes (proto3: every field set, $typeName first,
// fields in declaration order; test/brain/service.test.ts compares them):
// create() walks the schema for each, for every Service at start-up.
//
// Most services have no external or LB IPs, filters or affinity: those parts are
// one shared, frozen object each (a published model is never mutated).
const NO_IPS: IPSet = Object.freeze({ $typeName: "localv1.IPSet", V4: Object.freeze([]) as never, V6: Object.freeze([]) as never });
const NO_FILTERS = Object.freeze([]) as never as Service["IPFilters"];
const NO_AFFINITY = Object.freeze({ case: undefined }) as Service["SessionAffinity"];

function setOf(ips: readonly string[]): IPSet {
  if (!ips.length) return NO_IPS;
  const { V4, V6 } = byFamily(ips);
  // most services are single-stack: the other family's list is the shared empty one
  return { $typeName: "localv1.IPSet", V4: V4.length ? V4 : NO_IPS.V4, V6: V6.length ? V6 : NO_IPS.V6 };
}

/** `clusterIPs`: clusterIPsByFamily(svc.spec), when the caller has it already (isProxied asked first) */
export function serviceModel(svc: K8sService, clusterIPs: readonly string[] = clusterIPsByFamily(svc.spec)): Service {
  const spec = svc.spec;
  const lbIPs = loadBalancerIPs(svc);
  const ranges = spec.loadBalancerSourceRanges ?? [];
  // The index's own maps, not copies (neither side is ever mutated), unless one must go.
  const given = svc.metadata.annotations ?? {};
  let drop = false;
  for (let i = 0; i < DROPPED_ANNOTATIONS.length; i++) if (Object.hasOwn(given, DROPPED_ANNOTATIONS[i])) drop = true;
  const annotations = drop ? Object.fromEntries(Object.entries(given).filter(([k]) => !DROPPED_ANNOTATIONS.includes(k))) : given;
  const eLocal = externalPolicyLocal(svc);
  return {
    $typeName: "localv1.Service",
    Namespace: svc.metadata.namespace ?? "",
    Name: svc.metadata.name,
    Type: spec.type,
    IPs: {
      $typeName: "localv1.ServiceIPs",
      ClusterIPs: setOf(clusterIPs),
      ExternalIPs: setOf(spec.externalIPs ?? []),
      Headless: false,
      LoadBalancerIPs: setOf(lbIPs),
    },
    MapIP: false,
    Ports: (spec.ports ?? []).map((p) => ({
      $typeName: "localv1.PortMapping",
      Name: p.name ?? "",
      Protocol: protocolOf(p.protocol),
      Port: p.port,
      NodePort: hasNodePortsAndLB(spec.type) ? (p.nodePort ?? 0) : 0,
      // absent, 0 and "": the port itself (the API server's default)
      TargetPort:
        typeof p.targetPort === "number" && p.targetPort > 0 ? p.targetPort : typeof p.targetPort === "string" && p.targetPort ? 0 : p.port,
      TargetPortName: typeof p.targetPort === "string" ? p.targetPort : "",
    })),
    ExternalTrafficToLocal: eLocal,
    Labels: svc.metadata.labels ?? {},
    Annotations: annotations,
    IPFilters:
      lbIPs.length && ranges.length ? [{ $typeName: "localv1.IPFilter", TargetIPs: setOf(lbIPs), SourceRanges: [...ranges] }] : NO_FILTERS,
    SessionAffinity:
      spec.sessionAffinity === "ClientIP"
        ? {
            case: "ClientIP",
            value: {
              $typeName: "localv1.ClientIPAffinity",
              TimeoutSeconds: spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_AFFINITY_TIMEOUT_SECONDS,
            },
          }
        : NO_AFFINITY,
    InternalTrafficToLocal: internalPolicyLocal(svc),
    HealthCheckNodePort: spec.type === "LoadBalancer" && eLocal ? (spec.healthCheckNodePort ?? 0) : 0,
  };
}
