// Service -> localv1.Service: which services this proxy serves and the
// node-independent half of their model (IPs per family, ports, policies,
// affinity, source ranges).

import { create } from "@bufbuild/protobuf";
import {
  IPFilterSchema,
  IPSetSchema,
  PortMappingSchema,
  Protocol,
  ServiceIPsSchema,
  ServiceSchema,
  type Service,
} from "../../../gen/localv1/services_pb.ts";
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

// Most services have no external or LB IPs, filters or affinity: those parts are
// one shared, frozen object each (a published model is never mutated).
const NO_IPS = Object.freeze(create(IPSetSchema, { V4: Object.freeze([]) as never, V6: Object.freeze([]) as never }));
const NO_FILTERS = Object.freeze([]) as never as Service["IPFilters"];
const NO_AFFINITY = Object.freeze({ case: undefined }) as Service["SessionAffinity"];

const setOf = (ips: string[]) => (ips.length ? create(IPSetSchema, byFamily(ips)) : NO_IPS);

export function serviceModel(svc: K8sService): Service {
  const spec = svc.spec;
  const withNodePorts = spec.type === "NodePort" || spec.type === "LoadBalancer";
  const lbIPs = loadBalancerIPs(svc);
  const ranges = spec.loadBalancerSourceRanges ?? [];
  // The index's own maps, not copies (neither side is ever mutated), unless one must go.
  const given = svc.metadata.annotations ?? {};
  const annotations = Object.keys(given).some((k) => DROPPED_ANNOTATIONS.has(k)) ? Object.fromEntries(Object.entries(given).filter(([k]) => !DROPPED_ANNOTATIONS.has(k))) : given;
  const eLocal = externalPolicyLocal(svc);
  const model = create(ServiceSchema, {
    Namespace: svc.metadata.namespace,
    Name: svc.metadata.name,
    Type: spec.type,
    IPs: create(ServiceIPsSchema, {
      ClusterIPs: setOf(clusterIPs(svc)),
      ExternalIPs: setOf(spec.externalIPs ?? []),
      LoadBalancerIPs: setOf(lbIPs),
    }),
    Ports: (spec.ports ?? []).map((p) =>
      create(PortMappingSchema, {
        Name: p.name ?? "",
        Protocol: protocolOf(p.protocol),
        Port: p.port,
        NodePort: withNodePorts ? (p.nodePort ?? 0) : 0,
        TargetPort: typeof p.targetPort === "number" ? p.targetPort : p.targetPort === undefined ? p.port : 0,
        TargetPortName: typeof p.targetPort === "string" ? p.targetPort : "",
      }),
    ),
    ExternalTrafficToLocal: eLocal,
    InternalTrafficToLocal: internalPolicyLocal(svc),
    Labels: svc.metadata.labels ?? {},
    Annotations: annotations,
    IPFilters: lbIPs.length && ranges.length ? [create(IPFilterSchema, { TargetIPs: setOf(lbIPs), SourceRanges: [...ranges] })] : [],
    SessionAffinity:
      spec.sessionAffinity === "ClientIP"
        ? { case: "ClientIP", value: { $typeName: "localv1.ClientIPAffinity", TimeoutSeconds: spec.sessionAffinityConfig?.clientIP?.timeoutSeconds ?? DEFAULT_AFFINITY_TIMEOUT_SECONDS } }
        : { case: undefined },
    HealthCheckNodePort: spec.type === "LoadBalancer" && eLocal ? (spec.healthCheckNodePort ?? 0) : 0,
  });
  // create() makes a fresh empty list and oneof for each: swap in the shared ones.
  if (!model.IPFilters.length) model.IPFilters = NO_FILTERS;
  if (model.SessionAffinity.case === undefined) model.SessionAffinity = NO_AFFINITY;
  return model;
}
