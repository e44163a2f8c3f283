// Small builders for node-local services and endpoints, shared by the IPVS
// and winkernel suites (and the benchmark). Addresses come from the one plan.

import { create } from "@bufbuild/protobuf";
import {
  type Endpoint,
  EndpointSchema,
  type Service,
  ServiceSchema,
} from "../../src/gen/localv1/services_pb.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/state.ts";

export type ProtoName = "TCP" | "UDP" | "SCTP";
const protoNumber = { TCP: 1, UDP: 2, SCTP: 3 } as const;

export interface PortSpec {
  name?: string;
  protocol?: ProtoName;
  port: number;
  nodePort?: number;
  targetPort?: number;
}

export interface ServiceSpec {
  name: string;
  namespace?: string;
  type?: "ClusterIP" | "NodePort" | "LoadBalancer";
  clusterIPs?: string[];
  externalIPs?: string[];
  lbIPs?: string[];
  ports: PortSpec[];
  iTPLocal?: boolean;
  eTPLocal?: boolean;
  /** ClientIP affinity timeout; 0 = the default */
  affinity?: number;
  sourceRanges?: { targets: string[]; ranges: string[] };
  annotations?: Record<string, string>;
  healthCheckNodePort?: number;
}

const split = (ips: string[] = []) => ({ V4: ips.filter((i) => !i.includes(":")), V6: ips.filter((i) => i.includes(":")) });

export function service(s: ServiceSpec): Service {
  return create(ServiceSchema, {
    Namespace: s.namespace ?? "default",
    Name: s.name,
    Type: s.type ?? (s.lbIPs ? "LoadBalancer" : s.ports.some((p) => p.nodePort) ? "NodePort" : "ClusterIP"),
    IPs: { ClusterIPs: split(s.clusterIPs), ExternalIPs: split(s.externalIPs), LoadBalancerIPs: split(s.lbIPs) },
    Ports: s.ports.map((p) => ({
      Name: p.name ?? "",
      Protocol: protoNumber[p.protocol ?? "TCP"],
      Port: p.port,
      NodePort: p.nodePort ?? 0,
      TargetPort: p.targetPort ?? 0,
    })),
    InternalTrafficToLocal: s.iTPLocal ?? false,
    ExternalTrafficToLocal: s.eTPLocal ?? false,
    IPFilters: s.sourceRanges ? [{ TargetIPs: split(s.sourceRanges.targets), SourceRanges: s.sourceRanges.ranges }] : [],
    SessionAffinity: s.affinity !== undefined ? { case: "ClientIP", value: { TimeoutSeconds: s.affinity } } : { case: undefined },
    Annotations: s.annotations ?? {},
    HealthCheckNodePort: s.healthCheckNodePort ?? 0,
  });
}

export interface EndpointSpec {
  ips: string[];
  local?: boolean;
  /** scopes as the brain computed them (default: both) */
  internal?: boolean;
  external?: boolean;
  /** named port -> target port */
  ports?: Record<string, number>;
  terminating?: boolean;
}

export function endpoint(e: EndpointSpec): Endpoint {
  return create(EndpointSchema, {
    IPs: split(e.ips),
    Local: e.local ?? false,
    PortOverrides: Object.entries(e.ports ?? {}).map(([Name, Port]) => ({ Name, Port })),
    Scopes: { Internal: e.internal ?? true, External: e.external ?? true },
    Terminating: e.terminating ?? false,
  });
}

export const entry = (svc: Service, eps: Record<string, Endpoint> = {}): [string, ServiceEndpoints] => [
  `${svc.Namespace}/${svc.Name}`,
  { service: svc, endpoints: new Map(Object.entries(eps)) },
];

export function nodeState(rev: number, entries: [string, ServiceEndpoints][]): NodeState {
  return { nodeName: "node1", rev, services: new Map(entries) };
}

/** A new state from `prev` with some services replaced (or removed with undefined); others keep their identity. */
export function nextState(prev: NodeState, changes: Record<string, ServiceEndpoints | undefined>): NodeState {
  const services = new Map(prev.services);
  for (const [k, v] of Object.entries(changes)) v ? services.set(k, v) : services.delete(k);
  return { nodeName: prev.nodeName, rev: prev.rev + 1, services };
}
