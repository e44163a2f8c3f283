// Service equality without reflection: protobuf-es' `equals` walks the schema
// field by field, and importing the schema evaluates the generated file's
// descriptor registry at start-up (docs/results/2026-11.md). SERVICE_FIELDS lists
// what is compared; a test fails when the schema gains a field this does not
// know (test/brain/same-service.test.ts).

import type { IPFilter, IPSet, PortMapping, Service, ServiceIPs } from "../../gen/localv1/services_pb.ts";

/** Whether `a` and `b` hold the same values, as protobuf equality says (an unset message differs from an empty one). */
export function sameService(a: Service, b: Service): boolean {
  if (a === b) return true;
  return (
    a.Namespace === b.Namespace &&
    a.Name === b.Name &&
    a.Type === b.Type &&
    a.MapIP === b.MapIP &&
    a.ExternalTrafficToLocal === b.ExternalTrafficToLocal &&
    a.InternalTrafficToLocal === b.InternalTrafficToLocal &&
    a.HealthCheckNodePort === b.HealthCheckNodePort &&
    a.SessionAffinity.case === b.SessionAffinity.case &&
    a.SessionAffinity.value?.TimeoutSeconds === b.SessionAffinity.value?.TimeoutSeconds &&
    sameIPs(a.IPs, b.IPs) &&
    sameEach(a.Ports, b.Ports, samePort) &&
    sameEach(a.IPFilters, b.IPFilters, sameFilter) &&
    sameMap(a.Labels, b.Labels) &&
    sameMap(a.Annotations, b.Annotations)
  );
}

/** the Service fields (and nested message fields) sameService compares */
export const SERVICE_FIELDS = [
  "Namespace",
  "Name",
  "Type",
  "IPs.ClusterIPs.V4",
  "IPs.ClusterIPs.V6",
  "IPs.ExternalIPs.V4",
  "IPs.ExternalIPs.V6",
  "IPs.Headless",
  "IPs.LoadBalancerIPs.V4",
  "IPs.LoadBalancerIPs.V6",
  "MapIP",
  "Ports.Name",
  "Ports.Protocol",
  "Ports.Port",
  "Ports.NodePort",
  "Ports.TargetPort",
  "Ports.TargetPortName",
  "ExternalTrafficToLocal",
  "Labels",
  "Annotations",
  "IPFilters.TargetIPs.V4",
  "IPFilters.TargetIPs.V6",
  "IPFilters.SourceRanges",
  "SessionAffinity.ClientIP.TimeoutSeconds",
  "InternalTrafficToLocal",
  "HealthCheckNodePort",
];

function sameIPs(a: ServiceIPs | undefined, b: ServiceIPs | undefined): boolean {
  if (!a || !b) return a === b;
  return (
    a.Headless === b.Headless &&
    sameSet(a.ClusterIPs, b.ClusterIPs) &&
    sameSet(a.ExternalIPs, b.ExternalIPs) &&
    sameSet(a.LoadBalancerIPs, b.LoadBalancerIPs)
  );
}

function sameSet(a: IPSet | undefined, b: IPSet | undefined): boolean {
  if (!a || !b) return a === b;
  return sameList(a.V4, b.V4) && sameList(a.V6, b.V6);
}

const samePort = (a: PortMapping, b: PortMapping) =>
  a.Name === b.Name &&
  a.Protocol === b.Protocol &&
  a.Port === b.Port &&
  a.NodePort === b.NodePort &&
  a.TargetPort === b.TargetPort &&
  a.TargetPortName === b.TargetPortName;

const sameFilter = (a: IPFilter, b: IPFilter) => sameSet(a.TargetIPs, b.TargetIPs) && sameList(a.SourceRanges, b.SourceRanges);

function sameEach<T>(a: readonly T[], b: readonly T[], same: (x: T, y: T) => boolean): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (!same(a[i], b[i])) return false;
  return true;
}

const sameList = (a: readonly string[], b: readonly string[]) => sameEach(a, b, (x, y) => x === y);

function sameMap(a: Readonly<Record<string, string>>, b: Readonly<Record<string, string>>): boolean {
  const keys = Object.keys(a);
  if (keys.length !== Object.keys(b).length) return false;
  for (const k of keys) if (!Object.hasOwn(b, k) || a[k] !== b[k]) return false;
  return true;
}
