// The values of a Service or an EndpointSlice read as kube-proxy 1.36 reads
// them (pkg/proxy/serviceport.go newBaseServiceInfo, servicechangetracker.go,
// endpointslicecache.go, endpointschangetracker.go, pkg/proxy/util), for
// objects the fast check did not take as they were: addresses through
// k8s.io/utils/net's sloppy parsers (ip-sloppy.ts), source ranges trimmed,
// a value kube-proxy skips skipped (the rest of the object kept), values this
// version does not know read as kube-proxy reads them. Each skipped or
// unknown value comes back as a note for the source to log; only a Service
// left without a cluster IP to serve is dropped. Pure: objects in, objects
// and notes out.

import { enumReadings } from "./fields.ts";
import { parseCIDRSloppy, parseIPSloppy } from "./ip-sloppy.ts";
import type { DropReason, K8sEndpointSlice, K8sService } from "./objects.ts";
import { SERVICE_SPEC } from "./service-fields.ts";

export interface Note {
  /** `spec.loadBalancerSourceRanges[1]` */
  field: string;
  /** `"10.0.0.0/33" is not a CIDR: skipped` */
  message: string;
  /** no API server of any version would have held the value (the file source refuses it at start-up) */
  apiRejects: boolean;
}

export interface Drop {
  field: string;
  message: string;
  reason: DropReason;
}

export type Read<T> = { object: T; notes: Note[] } | { drop: Drop };

const q = (s: string) => JSON.stringify(s);
const READINGS = enumReadings(SERVICE_SPEC) as Array<{ name: keyof Spec; known: ReadonlySet<string>; reading: string }>;
const TYPE = READINGS.find((r) => r.name === "type")!;
const SPEC_ENUMS = READINGS.filter((r) => r !== TYPE);
const PROTOCOLS = new Set(["TCP", "UDP", "SCTP"]);
const IP_FAMILIES = new Set(["IPv4", "IPv6"]);
const familyOf = (canonicalIP: string) => (canonicalIP.includes(":") ? "IPv6" : "IPv4");

type Spec = K8sService["spec"];

/**
 * The cluster IP of each family, as kube-proxy's GetClusterIPByFamily picks
 * it: per family, the clusterIPs entry at that family's index in ipFamilies;
 * an entry of another family than its index says is not taken. Without
 * ipFamilies (an API server before 1.20 wrote neither list, and kube-proxy
 * then takes clusterIP alone), the first entry of each family in clusterIPs,
 * else clusterIP: the same for what API servers write, and what a
 * hand-written file (or a brain's global stream) means.
 */
export function clusterIPsByFamily(spec: Pick<Spec, "clusterIP" | "clusterIPs" | "ipFamilies">): string[] {
  const families = spec.ipFamilies;
  const ips = spec.clusterIPs?.length ? spec.clusterIPs : spec.clusterIP ? [spec.clusterIP] : [];
  // each family in turn, written out: every Service is read through here at start-up
  const out: string[] = [];
  const v4 = clusterIPOf(ips, families, "IPv4");
  if (v4) out.push(v4);
  const v6 = clusterIPOf(ips, families, "IPv6");
  if (v6) out.push(v6);
  return out;
}

/** clusterIPsByFamily's pick for one family */
function clusterIPOf(ips: readonly string[], families: readonly string[] | null | undefined, family: string): string | undefined {
  let ip: string | undefined;
  if (families?.length) ip = ips[families.indexOf(family)];
  else {
    for (let i = 0; i < ips.length; i++) {
      if (ips[i] !== "None" && familyOf(ips[i]) === family) {
        ip = ips[i];
        break;
      }
    }
  }
  return ip && ip !== "None" && familyOf(ip) === family ? ip : undefined;
}

/** Each IP of `list` parsed; the ones that are no IP skipped with a note. */
function readIPs(list: readonly string[], field: string, notes: Note[]): string[] {
  const out: string[] = [];
  list.forEach((raw, i) => {
    const ip = parseIPSloppy(raw);
    if (ip) out.push(ip);
    else notes.push({ field: `${field}[${i}]`, message: `${q(raw)} is not an IP address: skipped`, apiRejects: true });
  });
  return out;
}

/** spec.clusterIPs parsed, a bad entry skipped with its ipFamilies entry (the two lists go by index) */
function readClusterIPs(spec: Spec, notes: Note[]): void {
  const ips = spec.clusterIPs;
  const families = spec.ipFamilies;
  if (!ips?.length) return;
  const keptIPs: string[] = [];
  const keptFamilies: string[] = [];
  for (let i = 0; i < Math.max(ips.length, families?.length ?? 0); i++) {
    const family = families?.[i];
    if (i >= ips.length) {
      if (family !== undefined) keptFamilies.push(family);
      continue;
    }
    // (an entry of another family than its ipFamilies entry is left to clusterIPsByFamily, which takes none such)
    const ip = ips[i] === "None" ? "None" : parseIPSloppy(ips[i]);
    if (!ip) {
      notes.push({ field: `spec.clusterIPs[${i}]`, message: `${q(ips[i])} is not an IP address: skipped`, apiRejects: true });
      continue;
    }
    keptIPs.push(ip!);
    if (family !== undefined) keptFamilies.push(family);
  }
  spec.clusterIPs = keptIPs;
  if (families) spec.ipFamilies = keptFamilies;
}

/**
 * A Service as kube-proxy reads it. Dropped only when its clusterIP (not "",
 * not "None") does not parse: kube-proxy would program rules for an address
 * that is none.
 */
export function readService(svc: K8sService): Read<K8sService> {
  const notes: Note[] = [];
  const spec: Spec = { ...svc.spec };
  const unknown = (field: string, value: string, reading: string) =>
    notes.push({ field, message: `unknown value ${q(value)}: ${reading} (kube-proxy 1.36's reading)`, apiRejects: false });

  // the type first: it says how the rest is read
  if (!TYPE.known.has(spec.type)) unknown("spec.type", spec.type, TYPE.reading);
  if (spec.clusterIP && spec.clusterIP !== "None") {
    const ip = parseIPSloppy(spec.clusterIP);
    if (!ip)
      return {
        drop: {
          field: "spec.clusterIP",
          message: `${q(spec.clusterIP)} is not an IP address: the service has no cluster IP to serve`,
          reason: "invalid_cluster_ip",
        },
      };
    spec.clusterIP = ip;
    spec.ipFamilies?.forEach((f, i) => IP_FAMILIES.has(f) || unknown(`spec.ipFamilies[${i}]`, f, "no cluster IP of that family is served"));
  }
  // (if no entry of a family in ipFamilies is left, the model serves nothing, as kube-proxy)
  readClusterIPs(spec, notes);
  if (spec.externalIPs) spec.externalIPs = readIPs(spec.externalIPs, "spec.externalIPs", notes);
  if (spec.loadBalancerSourceRanges) {
    const ranges: string[] = [];
    // API servers accept (and kube-proxy trims) spaces around a range
    spec.loadBalancerSourceRanges.forEach((raw, i) => {
      const cidr = parseCIDRSloppy(raw.trim());
      if (cidr) ranges.push(cidr);
      else notes.push({ field: `spec.loadBalancerSourceRanges[${i}]`, message: `${q(raw)} is not a CIDR: skipped`, apiRejects: true });
    });
    spec.loadBalancerSourceRanges = ranges;
  }
  if (spec.ports) {
    // kube-proxy would write a rule its backend refuses for a protocol it does not know (a failed sync): the port is skipped
    spec.ports = spec.ports.filter(
      (p, i) =>
        PROTOCOLS.has(p.protocol) ||
        !notes.push({
          field: `spec.ports[${i}].protocol`,
          message: `unknown protocol ${q(p.protocol)}: port ${p.port} skipped`,
          apiRejects: false,
        }),
    );
  }
  // the other enums, as service-fields.ts says kube-proxy reads them
  for (const { name, known, reading } of SPEC_ENUMS) {
    const value = spec[name] as string | undefined;
    if (value !== undefined && !known.has(value)) unknown(`spec.${name}`, value, reading);
  }

  const out: K8sService = { ...svc, spec };
  const ingress = svc.status?.loadBalancer?.ingress;
  if (ingress) {
    const kept: NonNullable<typeof ingress> = [];
    ingress.forEach((ing, i) => {
      const mode = ing.ipMode;
      if (mode !== undefined && mode !== "VIP" && mode !== "Proxy")
        unknown(`status.loadBalancer.ingress[${i}].ipMode`, mode, "not VIP, so the IP gets no rules (as for Proxy)");
      if (!ing.ip) return kept.push(ing);
      const ip = parseIPSloppy(ing.ip);
      if (ip) kept.push({ ...ing, ip });
      else
        notes.push({
          field: `status.loadBalancer.ingress[${i}].ip`,
          message: `${q(ing.ip)} is not an IP address: skipped`,
          apiRejects: true,
        });
    });
    out.status = { ...svc.status, loadBalancer: { ...svc.status!.loadBalancer, ingress: kept } };
  }
  return { object: out, notes };
}

type SliceEndpoint = NonNullable<K8sEndpointSlice["endpoints"]>[number];

/**
 * An EndpointSlice as kube-proxy reads it: a slice of an address type other
 * than IPv4 and IPv6 is not read (kept, so that a later version of it
 * replaces this one); of each endpoint the first address only, parsed, and
 * an endpoint whose first address is no IP of the slice's family is skipped.
 */
export function readSlice(slice: K8sEndpointSlice): Read<K8sEndpointSlice> {
  const notes: Note[] = [];
  const type = slice.addressType;
  if (type !== "IPv4" && type !== "IPv6") {
    if (type !== "FQDN")
      notes.push({
        field: "addressType",
        message: `unknown value ${q(type)}: the slice is not read (kube-proxy 1.36 reads IPv4 and IPv6 slices)`,
        apiRejects: false,
      });
    return { object: slice, notes };
  }
  const out: K8sEndpointSlice = { ...slice };
  if (slice.endpoints) {
    const kept: SliceEndpoint[] = [];
    slice.endpoints.forEach((ep, i) => {
      const raw = ep.addresses[0];
      const ip = raw === undefined ? null : parseIPSloppy(raw);
      const why =
        raw === undefined
          ? "no address"
          : !ip
            ? `${q(raw)} is not an IP address`
            : familyOf(ip) !== type
              ? `${q(raw)} is not an ${type} address`
              : "";
      if (why) notes.push({ field: `endpoints[${i}].addresses[0]`, message: `${why}: endpoint skipped`, apiRejects: true });
      else kept.push(ip === raw ? ep : { ...ep, addresses: [ip!, ...ep.addresses.slice(1)] });
    });
    out.endpoints = kept;
  }
  if (slice.ports) {
    out.ports = slice.ports.filter(
      (p, i) =>
        PROTOCOLS.has(p.protocol) ||
        !notes.push({
          field: `ports[${i}].protocol`,
          message: `unknown protocol ${q(p.protocol)}: port skipped (it matches no service port)`,
          apiRejects: false,
        }),
    );
  }
  return { object: out, notes };
}
