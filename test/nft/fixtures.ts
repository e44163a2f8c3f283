// Small builders for node-local state in nft tests: services and endpoints as
// the brain would hand them over (scopes and policies already computed).

import { create } from "@bufbuild/protobuf";
import { defaultConfig, type Config } from "../../src/core/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Endpoint, NodeState, Service, ServiceEndpoints } from "../../src/core/state.ts";
import { EndpointSchema, Protocol, ServiceSchema } from "../../src/gen/localv1/services_pb.ts";
import type { BackendContext, Executor } from "../../src/plugins/backend.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";

export interface PortSpec {
  name?: string;
  protocol?: "TCP" | "UDP" | "SCTP";
  port: number;
  nodePort?: number;
  targetPort?: number;
}

export interface SvcSpec {
  ns?: string;
  name: string;
  type?: "ClusterIP" | "NodePort" | "LoadBalancer";
  clusterIPs?: string[];
  externalIPs?: string[];
  lbIPs?: string[];
  ports: PortSpec[];
  sourceRanges?: string[];
  affinitySeconds?: number;
  iTPLocal?: boolean;
  eTPLocal?: boolean;
}

const split = (ips: string[] = []) => ({ V4: ips.filter((i) => !i.includes(":")), V6: ips.filter((i) => i.includes(":")) });

export function svc(s: SvcSpec): Service {
  const lb = split(s.lbIPs);
  return create(ServiceSchema, {
    Namespace: s.ns ?? "default",
    Name: s.name,
    Type: s.type ?? (s.lbIPs?.length ? "LoadBalancer" : s.ports.some((p) => p.nodePort) ? "NodePort" : "ClusterIP"),
    IPs: { ClusterIPs: split(s.clusterIPs), ExternalIPs: split(s.externalIPs), LoadBalancerIPs: lb },
    Ports: s.ports.map((p) => ({
      Name: p.name ?? "",
      Protocol: Protocol[p.protocol ?? "TCP"],
      Port: p.port,
      NodePort: p.nodePort ?? 0,
      TargetPort: p.targetPort ?? 0,
    })),
    IPFilters: s.sourceRanges ? [{ TargetIPs: lb, SourceRanges: s.sourceRanges }] : [],
    SessionAffinity: s.affinitySeconds !== undefined ? { case: "ClientIP", value: { TimeoutSeconds: s.affinitySeconds } } : { case: undefined },
    InternalTrafficToLocal: s.iTPLocal ?? false,
    ExternalTrafficToLocal: s.eTPLocal ?? false,
  });
}

export interface EpSpec {
  ips: string[];
  local?: boolean;
  /** Scopes.Internal (default true) */
  internal?: boolean;
  /** Scopes.External (default true) */
  external?: boolean;
  /** port name -> target port */
  ports?: Record<string, number>;
  terminating?: boolean;
}

export function ep(e: EpSpec): Endpoint {
  return create(EndpointSchema, {
    IPs: split(e.ips),
    Local: e.local ?? true,
    PortOverrides: Object.entries(e.ports ?? {}).map(([Name, Port]) => ({ Name, Port })),
    Scopes: { Internal: e.internal ?? true, External: e.external ?? true },
    Terminating: e.terminating ?? false,
  });
}

export const key = (s: Service) => `${s.Namespace}/${s.Name}`;

export function entry(service: Service, endpoints: Record<string, Endpoint> = {}): ServiceEndpoints {
  return { service, endpoints: new Map(Object.entries(endpoints)) };
}

export function nodeState(entries: ServiceEndpoints[], rev = 1): NodeState {
  return { nodeName: "node0", rev, services: new Map(entries.map((e) => [key(e.service), e])) };
}

/** a new state where the given entries replaced (or added to) those of `prev`; the rest keep their identity */
export function nextState(prev: NodeState, replace: ServiceEndpoints[], remove: string[] = []): { state: NodeState; change: Set<string> } {
  const services = new Map(prev.services);
  const change = new Set<string>();
  for (const e of replace) {
    services.set(key(e.service), e);
    change.add(key(e.service));
  }
  for (const k of remove) {
    services.delete(k);
    change.add(k);
  }
  return { state: { nodeName: prev.nodeName, rev: prev.rev + 1, services }, change };
}

/** the config of node 0 of the address plan */
export function nodeConfig(overrides: Partial<Config> = {}): Config {
  return defaultConfig({
    nodeName: "node0",
    nodeIPs: [v4.node(0), v6.node(0)],
    clusterCIDRs: [plan.v4.clusterCIDR, plan.v6.clusterCIDR],
    ...overrides,
  });
}

/** a backend context that keeps what it printed (dry-run) and logged */
export function context(config: Config): BackendContext & { printed: string[]; lines: string[] } {
  const printed: string[] = [];
  const log = memoryLogger();
  return { config, log, out: (t) => printed.push(t), printed, lines: log.lines };
}

/** records every command; `fail` decides which ones throw */
export function recorder(fail: (argv: string[], stdin?: string) => string | undefined = () => undefined) {
  const calls: { argv: string[]; stdin?: string }[] = [];
  const exec: Executor = {
    run: async (argv, stdin) => {
      calls.push({ argv, stdin });
      const err = fail(argv, stdin);
      if (err) throw new Error(err);
      return "";
    },
  };
  return { exec, calls };
}
