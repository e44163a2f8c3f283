// globalv1 items -> the objects the brain's index holds. A node agent feeds
// these to the same Brain a full node runs, so both compute the same
// node-local state: for every service the brain proxies,
// `serviceModel(serviceFromModel(serviceModel(svc)))` equals
// `serviceModel(svc)`, and a slice rebuilt from its EndpointInfos gives the
// same candidates (test/global/roundtrip.test.ts checks both on the one
// address plan's clusters).

import { fromBinary } from "@bufbuild/protobuf";
import { EndpointInfoSchema, NodeInfoSchema, ServiceInfoSchema, type EndpointInfo } from "../../gen/globalv1/global_pb.ts";
import { Protocol, type Service } from "../../gen/localv1/services_pb.ts";
import type { K8sEndpointSlice, K8sNode, K8sService } from "../brain/k8s/objects.ts";
import { SERVICE_NAME_LABEL } from "../brain/model/endpoints.ts";
import { invalid } from "../errors.ts";

type SliceEndpoint = NonNullable<K8sEndpointSlice["endpoints"]>[number];
type SlicePort = NonNullable<K8sEndpointSlice["ports"]>[number];

/** What an EndpointInfo says about its slice. */
export interface SliceInfo {
  namespace: string;
  serviceName: string;
  name: string;
  family: "IPv4" | "IPv6";
  ports: SlicePort[];
}

/** One EndpointInfo: a slice entry, and its slice. */
export interface DecodedEndpoint {
  slice: SliceInfo;
  endpoint: SliceEndpoint;
}

const protocolName = (p: Protocol): "TCP" | "UDP" | "SCTP" => (p === Protocol.UDP ? "UDP" : p === Protocol.SCTP ? "SCTP" : "TCP");

/**
 * The node-independent model back into the Service fields serviceModel reads.
 * Objects sized for what 10,000 services have (see decodeEndpointInfo), the
 * rest added by addRareSpec, and one copy of strings they repeat (type, port
 * names, namespaces: a decode makes a new string for each field, where a
 * full binary's JSON parse shares them).
 */
export function serviceFromModel(m: Service): K8sService {
  const cluster = [...(m.IPs?.ClusterIPs?.V4 ?? []), ...(m.IPs?.ClusterIPs?.V6 ?? [])];
  const svc: K8sService = {
    kind: "Service",
    metadata: { name: m.Name, namespace: shared(m.Namespace), labels: nonEmpty(m.Labels), annotations: nonEmpty(m.Annotations) },
    spec: {
      type: shared(m.Type) as K8sService["spec"]["type"],
      clusterIP: cluster[0],
      clusterIPs: cluster,
      ports: m.Ports.map((p) => ({
        name: shared(p.Name),
        protocol: protocolName(p.Protocol),
        port: p.Port,
        targetPort: p.TargetPortName ? shared(p.TargetPortName) : p.TargetPort,
        nodePort: p.NodePort || undefined,
      })),
    },
  };
  addRareSpec(svc, m);
  return svc;
}

const nonEmpty = (r: Record<string, string>) => (Object.keys(r).length ? { ...r } : undefined);

/** External and LB IPs, source ranges, affinity, Local policies, health-check port: set on few services. */
function addRareSpec(svc: K8sService, m: Service) {
  const spec = svc.spec;
  const ips = m.IPs;
  const external = [...(ips?.ExternalIPs?.V4 ?? []), ...(ips?.ExternalIPs?.V6 ?? [])];
  const lb = [...(ips?.LoadBalancerIPs?.V4 ?? []), ...(ips?.LoadBalancerIPs?.V6 ?? [])];
  const ranges = m.IPFilters.flatMap((f) => f.SourceRanges);
  if (external.length) spec.externalIPs = external;
  if (ranges.length) spec.loadBalancerSourceRanges = ranges;
  const affinity = m.SessionAffinity.case === "ClientIP" ? m.SessionAffinity.value.TimeoutSeconds : 0;
  if (affinity) {
    spec.sessionAffinity = "ClientIP";
    spec.sessionAffinityConfig = { clientIP: { timeoutSeconds: affinity } };
  }
  if (m.ExternalTrafficToLocal) spec.externalTrafficPolicy = "Local";
  if (m.InternalTrafficToLocal) spec.internalTrafficPolicy = "Local";
  if (m.HealthCheckNodePort) spec.healthCheckNodePort = m.HealthCheckNodePort;
  // Ingress with ipMode Proxy was left out of the model already.
  if (lb.length) svc.status = { loadBalancer: { ingress: lb.map((ip) => ({ ip })) } };
}

export function decodeServiceInfo(bytes: Uint8Array, path: string): K8sService {
  const info = fromBinary(ServiceInfoSchema, bytes);
  if (!info.Service?.Name) throw invalid(`global service ${path}: Service.Name is empty`);
  return serviceFromModel(info.Service);
}

export function decodeEndpointInfo(bytes: Uint8Array, path: string): DecodedEndpoint {
  const info = fromBinary(EndpointInfoSchema, bytes);
  const ips = info.Endpoint?.IPs;
  const v4 = ips?.V4[0];
  const ip = v4 ?? ips?.V6[0];
  if (!ip) throw invalid(`global endpoint ${path}: Endpoint.IPs is empty`);
  if (!info.ServiceName || !info.SourceName) throw invalid(`global endpoint ${path}: ServiceName and SourceName are required`);
  const c = info.Conditions;
  const ns = shared(info.Namespace);
  const node = info.Topology?.Node;
  // One literal with the fields nearly every endpoint has: JSC sizes the
  // objects a function makes for every property it may add to them, and the
  // seven optional ones made each of 100,000 endpoints 80 bytes, not 48.
  const endpoint: SliceEndpoint = {
    addresses: [ip],
    // An old kpng server sends Ready only; serving then follows ready.
    conditions: conditionsOf(c?.Ready ?? false, c ? c.Serving || c.Ready : false, c?.Terminating ?? false),
    nodeName: node ? shared(node) : undefined,
    pod: info.PodName || undefined,
  };
  if (info.Endpoint?.Hostname || info.Topology?.Zone || info.Hints) addRareFields(endpoint, info);
  return {
    slice: {
      namespace: ns,
      serviceName: info.ServiceName,
      name: info.SourceName,
      family: v4 ? "IPv4" : "IPv6",
      ports: (info.Endpoint?.PortOverrides ?? []).map((p) => ({ name: shared(p.Name), protocol: "TCP" as const, port: p.Port })),
    },
    endpoint,
  };
}

/** Hostname (StatefulSet pods), zone and hints (topology-aware routing): set on few endpoints, so not in every endpoint object's size. */
function addRareFields(endpoint: SliceEndpoint, info: EndpointInfo) {
  if (info.Endpoint?.Hostname) endpoint.hostname = info.Endpoint.Hostname;
  if (info.Topology?.Zone) endpoint.zone = shared(info.Topology.Zone);
  const hints = info.Hints;
  if (hints)
    endpoint.hints = {
      forZones: hints.Zones.map((name) => ({ name: shared(name) })),
      forNodes: hints.Nodes.map((name) => ({ name: shared(name) })),
    };
}

// Node names, zones, namespaces and port names repeat across 100,000
// endpoints and 10,000 services; each decode makes a new string. One copy
// each (bounded: cleared if it ever holds more than a cluster's worth).
const names = new Map<string, string>();
function shared(s: string): string {
  const had = names.get(s);
  if (had !== undefined) return had;
  if (names.size >= 100_000) names.clear();
  names.set(s, s);
  return s;
}

// Eight combinations of three booleans: one object each, never mutated (the brain only reads).
const conditionObjects = new Map<number, { ready: boolean; serving: boolean; terminating: boolean }>();
function conditionsOf(ready: boolean, serving: boolean, terminating: boolean) {
  const k = (ready ? 1 : 0) | (serving ? 2 : 0) | (terminating ? 4 : 0);
  let o = conditionObjects.get(k);
  if (!o) conditionObjects.set(k, (o = Object.freeze({ ready, serving, terminating })));
  return o;
}

/** A slice from its endpoints (in the order they arrived). */
export function sliceOf(info: SliceInfo, endpoints: SliceEndpoint[]): K8sEndpointSlice {
  return {
    kind: "EndpointSlice",
    metadata: { name: info.name, namespace: info.namespace, labels: { [SERVICE_NAME_LABEL]: info.serviceName } },
    addressType: info.family,
    endpoints,
    ports: info.ports,
  };
}

export function decodeNodeInfo(bytes: Uint8Array, path: string): K8sNode {
  const node = fromBinary(NodeInfoSchema, bytes).Node;
  if (!node?.Name) throw invalid(`global node ${path}: Node.Name is empty`);
  return {
    kind: "Node",
    metadata: { name: node.Name, labels: { ...node.Labels } },
    status: { addresses: node.Addresses.map((a) => ({ type: a.Type, address: a.Address })) },
  };
}
