// `kpng local`: the node-local state as plain JSON with lowerCamelCase keys,
// sorted by namespace/name and endpoints by first IP (the CLI contract).

import { stringify } from "yaml";
import { Protocol, type Endpoint, type IPSet, type Service } from "../../gen/localv1/services_pb.ts";
import type { NodeState } from "./state.ts";

// How a Service's fields read to a person, here and in `kpng get` (introspect/services.ts).
/** both families' addresses, IPv4 first */
export const ipsOf = (s: IPSet | undefined) => [...(s?.V4 ?? []), ...(s?.V6 ?? [])];
/** a traffic policy by its Kubernetes name */
export const policyName = (toLocal: boolean) => (toLocal ? "Local" : "Cluster");
/** the ClientIP affinity timeout; 0 without affinity */
export const affinityTimeoutSeconds = (s: Service) => (s.SessionAffinity.case === "ClientIP" ? s.SessionAffinity.value.TimeoutSeconds : 0);
const firstIP = (e: Endpoint) => ipsOf(e.IPs)[0] ?? "";

/** Orders IPs numerically within a family, IPv4 before IPv6, so 10.0.0.9 < 10.0.0.10. */
function compareIP(a: string, b: string): number {
  const key = (ip: string) =>
    ip.includes(":")
      ? "6" +
        ip
          .split(":")
          .map((p) => p.padStart(4, "0"))
          .join(":")
      : "4" +
        ip
          .split(".")
          .map((p) => p.padStart(3, "0"))
          .join(".");
  const ka = key(a);
  const kb = key(b);
  return ka < kb ? -1 : ka > kb ? 1 : 0;
}

export function localStateJSON(state: NodeState) {
  const services = [...state.services.values()].sort((a, b) =>
    a.service.Namespace === b.service.Namespace
      ? a.service.Name < b.service.Name
        ? -1
        : 1
      : a.service.Namespace < b.service.Namespace
        ? -1
        : 1,
  );
  return {
    nodeName: state.nodeName,
    rev: state.rev,
    services: services.map(({ service: s, endpoints }) => ({
      namespace: s.Namespace,
      name: s.Name,
      type: s.Type,
      clusterIPs: ipsOf(s.IPs?.ClusterIPs),
      externalIPs: ipsOf(s.IPs?.ExternalIPs),
      loadBalancerIPs: ipsOf(s.IPs?.LoadBalancerIPs),
      loadBalancerSourceRanges: s.IPFilters.flatMap((f) => f.SourceRanges),
      ports: s.Ports.map((p) => ({
        name: p.Name,
        protocol: Protocol[p.Protocol],
        port: p.Port,
        nodePort: p.NodePort,
        targetPort: p.TargetPortName || p.TargetPort,
      })),
      internalTrafficPolicy: policyName(s.InternalTrafficToLocal),
      externalTrafficPolicy: policyName(s.ExternalTrafficToLocal),
      sessionAffinityTimeoutSeconds: affinityTimeoutSeconds(s),
      healthCheckNodePort: s.HealthCheckNodePort,
      endpoints: [...endpoints.values()]
        .sort((a, b) => compareIP(firstIP(a), firstIP(b)))
        .map((e) => ({
          ips: ipsOf(e.IPs),
          local: e.Local,
          internal: e.Scopes?.Internal ?? false,
          external: e.Scopes?.External ?? false,
          terminating: e.Terminating,
          nodeName: e.NodeName,
          zone: e.Zone,
          ports: Object.fromEntries(e.PortOverrides.map((p) => [p.Name, p.Port])),
        })),
    })),
  };
}

export function formatLocalState(state: NodeState, format: "json" | "yaml"): string {
  const doc = localStateJSON(state);
  return format === "json" ? JSON.stringify(doc, null, 2) + "\n" : stringify(doc);
}
