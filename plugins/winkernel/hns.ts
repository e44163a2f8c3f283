// The Host Compute Network (HNS v2) objects kpng creates, as the JSON the
// HCN API takes (field names and flag values of microsoft/hcsshim's hcn
// package), and the small client interface the backend programs through:
// the real one calls computenetwork.dll on Windows, the recorder stands in
// everywhere else.

export const schemaVersion = { Major: 2, Minor: 0 } as const;

/** HostComputeLoadBalancer.Flags */
export const lbFlags = { none: 0, dsr: 1, ipv6: 2 } as const;

/** LoadBalancerPortMapping.Flags */
export const portMappingFlags = {
  none: 0,
  ilb: 1,
  /** node ports: the VIP is every host address, routed locally */
  localRoutedVip: 2,
  useMux: 4,
  preserveDip: 8,
  /** the frontend is a Service externalIP */
  vipExternalIp: 16,
} as const;

/** LoadBalancerPortMapping.DistributionType: SourceIP gives ClientIP session affinity. */
export const distribution = { none: 0, sourceIPProtocol: 1, sourceIP: 2 } as const;

/** IANA protocol numbers HNS port mappings use. HNS has no SCTP load balancing. */
export const hnsProtocols: Record<number, number> = { 1: 6, 2: 17 };

export interface HcnPortMapping {
  Protocol: number;
  InternalPort?: number;
  ExternalPort?: number;
  DistributionType?: number;
  Flags?: number;
}

/** Settings of HcnCreateLoadBalancer / HcnModifyLoadBalancer (omitempty fields left out when zero). */
export interface HcnLoadBalancer {
  SchemaVersion: typeof schemaVersion;
  HostComputeEndpoints: string[];
  SourceVIP?: string;
  FrontendVIPs?: string[];
  PortMappings: HcnPortMapping[];
  Flags?: number;
}

/** Settings of HcnCreateEndpoint for a remote endpoint (a pod on another node). */
export interface HcnRemoteEndpoint {
  SchemaVersion: typeof schemaVersion;
  IpConfigurations: { IpAddress: string }[];
  MacAddress: string;
  /** EndpointFlagsRemoteEndpoint */
  Flags: 1;
}

/** An endpoint as listed on the network: local ones are created by the CNI plugin, remote ones by kpng. */
export interface HnsEndpoint {
  id: string;
  ip: string;
  remote: boolean;
}

export interface HnsLoadBalancerInfo {
  id: string;
  settings: HcnLoadBalancer;
}

export interface HnsClient {
  /** endpoints on the configured network */
  listEndpoints(): Promise<HnsEndpoint[]>;
  createEndpoint(settings: HcnRemoteEndpoint): Promise<string>;
  deleteEndpoint(id: string): Promise<void>;
  listLoadBalancers(): Promise<HnsLoadBalancerInfo[]>;
  createLoadBalancer(settings: HcnLoadBalancer): Promise<string>;
  /** HcnModifyLoadBalancer: endpoints change without a window where the VIP is unserved */
  updateLoadBalancer(id: string, settings: HcnLoadBalancer): Promise<void>;
  deleteLoadBalancer(id: string): Promise<void>;
}

/** One HNS call as recorded or printed by `--dry-run` (one JSON line each). */
export type HnsCall =
  | { call: "HcnEnumerateEndpoints" }
  | { call: "HcnCreateEndpoint"; id: string; settings: HcnRemoteEndpoint }
  | { call: "HcnDeleteEndpoint"; id: string }
  | { call: "HcnEnumerateLoadBalancers" }
  | { call: "HcnCreateLoadBalancer"; id: string; settings: HcnLoadBalancer }
  | { call: "HcnModifyLoadBalancer"; id: string; settings: HcnLoadBalancer }
  | { call: "HcnDeleteLoadBalancer"; id: string };

/** Upstream's made-up MAC for remote endpoints (pkg/proxy/winkernel conjureMac): a prefix and the address's bytes. */
export function conjureMac(prefix: string, ip: string): string {
  const hex = (n: number) => n.toString(16).padStart(2, "0");
  if (!ip.includes(":"))
    return `${prefix}-${ip
      .split(".")
      .map((o) => hex(Number(o)))
      .join("-")}`;
  // IPv6: the last four bytes, lowest first, as upstream does
  const groups = expandV6(ip);
  const bytes = groups.flatMap((g) => [g >> 8, g & 255]);
  return `${prefix}-${[bytes[15]!, bytes[14]!, bytes[13]!, bytes[12]!].map(hex).join("-")}`;
}

function expandV6(ip: string): number[] {
  const [head, tail] = ip.split("::") as [string, string | undefined];
  const h = head ? head.split(":").map((x) => parseInt(x, 16)) : [];
  const t = tail ? tail.split(":").map((x) => parseInt(x, 16)) : [];
  return [...h, ...Array<number>(8 - h.length - t.length).fill(0), ...t];
}
