// The questions every backend asks of a service and its ports, answered once
// here, in the spirit of upstream's pkg/proxy/serviceport.go
// (`ExternallyAccessible`, ...). The brain already applied the traffic
// policies, topology and terminating fallback to the endpoints' scopes; what
// is left is how to read a port and where the service lives.

import type { Endpoint, PortMapping, Service } from "../../gen/localv1/services_pb.ts";
import { Protocol } from "../../core/protocol.ts";
import { DEFAULT_AFFINITY_TIMEOUT_SECONDS } from "../../core/brain/model/service.ts";
import { ipsOf, type Family } from "./family.ts";

export type ProtocolName = "tcp" | "udp" | "sctp";

const PROTOCOL_NAMES: Partial<Record<Protocol, ProtocolName>> = { [Protocol.TCP]: "tcp", [Protocol.UDP]: "udp", [Protocol.SCTP]: "sctp" };

/** "tcp", "udp", "sctp"; undefined for a protocol kpng does not program (the port is skipped) */
export const protocolName = (p: Protocol): ProtocolName | undefined => PROTOCOL_NAMES[p];

/** a port number a rule can carry (1-65535); 0 means "none" on the wire */
export const isPort = (n: number) => n > 0 && n < 65536;

/**
 * The port an endpoint serves a service port on: its PortOverride of the same
 * name (the EndpointSlice port, which resolves named target ports), else the
 * service's numeric targetPort, else the service port itself.
 */
export function targetPort(ep: Endpoint, pm: PortMapping): number {
  // a loop, not find(): once per endpoint and port of every render (100,000s at scale)
  const overrides = ep.PortOverrides;
  for (let i = 0; i < overrides.length; i++) if (overrides[i].Name === pm.Name) return overrides[i].Port || pm.TargetPort || pm.Port;
  return pm.TargetPort || pm.Port;
}

/**
 * ClientIP affinity timeout in seconds, or undefined without affinity. The
 * brain always fills the timeout; the default covers a brain that does not
 * (kpng's wire format leaves 0 meaning "unset").
 */
export function affinitySeconds(svc: Service): number | undefined {
  return svc.SessionAffinity.case === "ClientIP" ? svc.SessionAffinity.value.TimeoutSeconds || DEFAULT_AFFINITY_TIMEOUT_SECONDS : undefined;
}

/**
 * Whether the service is programmed in `family`: upstream runs one proxier
 * per family and a single-stack service lives in the family of its cluster
 * IP (no node ports in the other one); a service without any cluster IP
 * lives in the families of its external and load-balancer IPs.
 */
export function servedInFamily(svc: Service, family: Family): boolean {
  const ips = svc.IPs;
  if (ips?.ClusterIPs?.V4.length || ips?.ClusterIPs?.V6.length) return ipsOf(ips.ClusterIPs, family).length > 0;
  return ipsOf(ips?.ExternalIPs, family).length > 0 || ipsOf(ips?.LoadBalancerIPs, family).length > 0;
}

/**
 * Upstream's `ExternallyAccessible`, in one family: whether traffic from
 * outside the node reaches this port, by a node port or an external or
 * load-balancer IP of the family. `nodePorts: false` when node ports answer
 * on no address of this node (nft with an empty --nodeport-addresses match).
 */
export function externallyAccessible(svc: Service, pm: PortMapping, family: Family, nodePorts?: boolean): boolean {
  // `nodePorts` is optional rather than defaulted: JSC optimises a function with a default parameter far less (ip.ts)
  return (
    (nodePorts !== false && isPort(pm.NodePort)) ||
    ipsOf(svc.IPs?.ExternalIPs, family).length > 0 ||
    ipsOf(svc.IPs?.LoadBalancerIPs, family).length > 0
  );
}
