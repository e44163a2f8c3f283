// Small builders for the iptables suites: services and endpoints as the brain
// would publish them, with addresses from the one address plan.

import { create } from "@bufbuild/protobuf";
import { defaultConfig, type Config } from "../../src/core/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import {
  EndpointSchema,
  Protocol,
  ServiceSchema,
  type Endpoint,
  type Service,
} from "../../src/gen/localv1/services_pb.ts";
import type { BackendContext } from "../../src/plugins/backend.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";

export interface PortSpec {
  name?: string;
  proto?: "tcp" | "udp" | "sctp";
  port: number;
  nodePort?: number;
  targetPort?: number;
}

export interface SvcSpec {
  ns?: string;
  name: string;
  clusterIPs?: string[];
  externalIPs?: string[];
  lbIPs?: string[];
  ports: PortSpec[];
  iTPLocal?: boolean;
  eTPLocal?: boolean;
  affinitySeconds?: number;
  sourceRanges?: string[];
  healthCheckNodePort?: number;
}

const protos = { tcp: Protocol.TCP, udp: Protocol.UDP, sctp: Protocol.SCTP };
const split = (ips: string[] = []) => ({ V4: ips.filter((i) => !i.includes(":")), V6: ips.filter((i) => i.includes(":")) });

export function svc(s: SvcSpec): Service {
  const lb = s.lbIPs ?? [];
  return create(ServiceSchema, {
    Namespace: s.ns ?? "default",
    Name: s.name,
    Type: lb.length ? "LoadBalancer" : s.ports.some((p) => p.nodePort) ? "NodePort" : "ClusterIP",
    IPs: { ClusterIPs: split(s.clusterIPs), ExternalIPs: split(s.externalIPs), LoadBalancerIPs: split(lb) },
    Ports: s.ports.map((p) => ({ Name: p.name ?? "", Protocol: protos[p.proto ?? "tcp"], Port: p.port, NodePort: p.nodePort ?? 0, TargetPort: p.targetPort ?? p.port })),
    InternalTrafficToLocal: !!s.iTPLocal,
    ExternalTrafficToLocal: !!s.eTPLocal,
    IPFilters: s.sourceRanges ? [{ TargetIPs: split(lb), SourceRanges: s.sourceRanges }] : [],
    SessionAffinity: s.affinitySeconds !== undefined ? { case: "ClientIP", value: { TimeoutSeconds: s.affinitySeconds } } : { case: undefined },
    HealthCheckNodePort: s.healthCheckNodePort ?? 0,
  });
}

export interface EpSpec {
  ips: string[];
  local?: boolean;
  /** default true */
  internal?: boolean;
  /** default true */
  external?: boolean;
  /** port name -> target port */
  ports?: Record<string, number>;
}

export function ep(e: EpSpec): Endpoint {
  return create(EndpointSchema, {
    IPs: split(e.ips),
    Local: !!e.local,
    Scopes: { Internal: e.internal ?? true, External: e.external ?? true },
    PortOverrides: Object.entries(e.ports ?? {}).map(([Name, Port]) => ({ Name, Port })),
  });
}

/** The node of the namespace topology: node 0, pods in 198.19.0.0/24. */
export function testConfig(overrides: Partial<Config> = {}): Config {
  return defaultConfig({
    nodeName: "node0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
    ...overrides,
  });
}

export function testContext(config: Config = testConfig()): BackendContext & { printed: string[]; log: ReturnType<typeof memoryLogger> } {
  const printed: string[] = [];
  return { config, log: memoryLogger(), out: (t) => printed.push(t), printed };
}

export { v4, v6 };
