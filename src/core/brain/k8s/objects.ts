// The few fields of Kubernetes objects kpng reads, as valibot schemas: one
// definition gives both the TypeScript type and the run-time validation of
// every object that comes from a file or the API server. Unknown fields are
// allowed (real objects carry many we do not read) and left out of the
// output: the brain keeps 20,000 objects at 10k services, and a uid, a
// managedFields entry or an ownerReference kept in each costs memory and
// makes changes that mean nothing here look like changes.

import * as v from "valibot";
import { fastService } from "./fast-service.ts";
import { entries } from "./fields.ts";
import { port as portKind, SERVICE_PORT, SERVICE_SPEC, SERVICE_STATUS } from "./service-fields.ts";
import { fastSlice } from "./fast-slice.ts";
import { isCanonicalIPv6, parseIPSloppy } from "./ip-sloppy.ts";
import { isIPv4 } from "../../net/ip.ts";
import { readService, readSlice, type Note, type Read } from "./read.ts";
import { issuePath, issueProblem } from "../../valibot-issues.ts";

// Two schemas per kind. The *shape* (ServiceShape, EndpointSliceShape) is the
// structure an API server can store: it refuses only what no API server
// would ever hold (a port out of range, a number where a name goes), and
// takes any string where Kubernetes has an enum or an address, since a newer
// API server may send a value this version does not know and an older one
// stored addresses the current validation refuses. read.ts then reads those
// values as kube-proxy 1.36 does. The *well-formed* schemas (ServiceSchema,
// EndpointSliceSchema) are the subset that needs no reading: known enum
// values, addresses already in the form kube-proxy prints them. The
// hand-written fast checks copy them; only what they refuse takes the
// shape-and-read path.

const text = v.string("must be a string");
const port = portKind.wellFormed;
const protocol = SERVICE_PORT.protocol.wellFormed;
const labels = v.optional(v.nullable(v.record(v.string(), v.string())));
const list = <T extends v.GenericSchema>(item: T) => v.optional(v.nullable(v.array(item)));

const metadata = v.object({
  name: v.pipe(v.string("is required"), v.minLength(1, "is required")),
  namespace: v.optional(v.string()),
  labels,
  annotations: labels,
});

// The Service's fields are described once, in service-fields.ts: both schemas are made of its tables.

/** well-formed: what the fast path takes as it is */
export const ServiceSchema = v.object({
  kind: v.literal("Service"),
  metadata,
  spec: v.object(entries(SERVICE_SPEC, "wellFormed")),
  status: SERVICE_STATUS.wellFormed,
});

/** what an API server may hold: structure checked, enum and address values left to read.ts */
export const ServiceShape = v.object({
  kind: v.literal("Service"),
  metadata,
  spec: v.object(entries(SERVICE_SPEC, "shape")),
  status: SERVICE_STATUS.shape,
});

const hintList = list(v.object({ name: v.string() }));
const conditions = v.optional(
  v.object({
    ready: v.optional(v.nullable(v.boolean())),
    serving: v.optional(v.nullable(v.boolean())),
    terminating: v.optional(v.nullable(v.boolean())),
  }),
);
const endpointFields = {
  conditions,
  hostname: v.optional(v.string()),
  nodeName: v.optional(v.string()),
  zone: v.optional(v.string()),
  hints: v.optional(v.object({ forZones: hintList, forNodes: hintList })),
  targetRef: v.optional(v.object({ kind: v.optional(v.string()), name: v.optional(v.string()), namespace: v.optional(v.string()) })),
};
// Of targetRef only a Pod's name is read (the endpoint's key): an object per
// endpoint kept for it would be memory that grows with the cluster.
const podOf = <T extends { targetRef?: { kind?: string; name?: string } }>({ targetRef, ...ep }: T) =>
  (targetRef?.kind === "Pod" && targetRef.name ? { ...ep, pod: targetRef.name } : ep) as Omit<T, "targetRef"> & { pod?: string };

/** well-formed: what the fast path takes (its first addresses are then put as kube-proxy prints them, by canonicalFirstAddresses) */
export const EndpointSliceSchema = v.object({
  kind: v.literal("EndpointSlice"),
  metadata,
  addressType: v.picklist(["IPv4", "IPv6", "FQDN"], "must be IPv4, IPv6 or FQDN"),
  endpoints: list(
    v.pipe(
      v.object({ addresses: v.pipe(v.array(v.string()), v.minLength(1, "must have at least one address")), ...endpointFields }),
      v.transform(podOf),
    ),
  ),
  ports: list(v.object({ name: v.optional(v.nullable(v.string())), protocol, port: v.optional(v.nullable(port)) })),
});

/** what an API server may hold: read.ts reads the address type, the addresses and the port protocols */
export const EndpointSliceShape = v.object({
  kind: v.literal("EndpointSlice"),
  metadata,
  addressType: text,
  endpoints: list(v.pipe(v.object({ addresses: v.array(text), ...endpointFields }), v.transform(podOf))),
  ports: list(v.object({ name: v.optional(v.nullable(text)), protocol: v.optional(text, "TCP"), port: v.optional(v.nullable(port)) })),
});

export const NodeSchema = v.object({
  kind: v.literal("Node"),
  metadata: v.object({ ...metadata.entries, deletionTimestamp: v.optional(v.string()) }),
  // the health check reads the to-be-deleted taint; detectLocalMode NodeCIDR the pod CIDRs
  spec: v.optional(v.object({ taints: list(v.object({ key: v.optional(v.string()) })), podCIDRs: list(v.string()) })),
  status: v.optional(v.object({ addresses: list(v.object({ type: v.string(), address: v.string() })) })),
});

/** A Service as kpng keeps it: the shape, its values read as kube-proxy reads them (read.ts). */
export type K8sService = v.InferOutput<typeof ServiceShape>;
export type K8sEndpointSlice = v.InferOutput<typeof EndpointSliceShape>;
export type K8sNode = v.InferOutput<typeof NodeSchema>;
export type K8sObject = K8sService | K8sEndpointSlice | K8sNode;
export type Kind = K8sObject["kind"];
export const kinds: readonly Kind[] = ["Service", "EndpointSlice", "Node"];
export type { Note } from "./read.ts";

const shapes = { Service: ServiceShape, EndpointSlice: EndpointSliceShape, Node: NodeSchema } as const;

/** `service default/web` — how logs and errors name an object. */
export function objectName(obj: { kind?: unknown; metadata?: { namespace?: unknown; name?: unknown } }): string {
  const kind = typeof obj.kind === "string" ? obj.kind.charAt(0).toLowerCase() + obj.kind.slice(1) : "object";
  const ns = obj.metadata?.namespace;
  const name = obj.metadata?.name;
  return `${kind} ${typeof ns === "string" && ns ? `${ns}/` : ""}${typeof name === "string" ? name : "<unnamed>"}`;
}

/**
 * The first address of each endpoint of an IPv4/IPv6 slice (the only one
 * kube-proxy reads) as kube-proxy prints it: one already so is left alone,
 * one in another spelling of an IP of the slice's family is rewritten in
 * place (the fast check's copy), as read.ts would. False when one is no IP of
 * that family: read.ts then skips that endpoint and says so. Indexed loops
 * and one family's check: 100,000 addresses at 10k services, at start-up.
 */
export function canonicalFirstAddresses(slice: K8sEndpointSlice): boolean {
  if ((slice.addressType !== "IPv4" && slice.addressType !== "IPv6") || !slice.endpoints) return true;
  const v6 = slice.addressType === "IPv6";
  const eps = slice.endpoints;
  for (let i = 0; i < eps.length; i++) if (!canonicalFirstAddress(eps[i].addresses, v6)) return false;
  return true;
}

/** canonicalFirstAddresses for one endpoint's addresses */
export function canonicalFirstAddress(addresses: string[], v6: boolean): boolean {
  if (v6 ? isCanonicalIPv6(addresses[0]) : isIPv4(addresses[0])) return true;
  const ip = parseIPSloppy(addresses[0]);
  if (!ip || ip.includes(":") !== v6) return false;
  addresses[0] = ip;
  return true;
}

/** Why an object was refused (kpng_objects_dropped_total's reason). */
export type DropReason = "malformed" | "invalid_cluster_ip";

/** Objects the sources refused, by kind and reason: kpng_objects_dropped_total (kube-proxy has no such metric). */
export class DropCounts {
  private readonly counts = new Map<string, { kind: Kind; reason: DropReason; n: number }>();
  add(kind: Kind, reason: DropReason): void {
    const key = `${kind}/${reason}`;
    const c = this.counts.get(key);
    if (c) c.n++;
    else this.counts.set(key, { kind, reason, n: 1 });
  }
  values(): Iterable<{ kind: Kind; reason: DropReason; n: number }> {
    return this.counts.values();
  }
}

/**
 * An item a decoder read straight into its well-formed object (what the fast
 * check and finish() make of it, nothing to note): parseObject takes it as it
 * is. `metadata` is what the sources read of an item: its name, namespace
 * and resourceVersion.
 */
export class Checked {
  constructor(
    readonly object: K8sService | K8sEndpointSlice,
    readonly metadata: { name: string; namespace?: string; resourceVersion?: string },
  ) {}

  get kind(): string {
    return this.object.kind;
  }
}

export type ParseResult =
  | { ok: true; object: K8sObject; notes?: readonly Note[] }
  | { ok: false; error: string; reason: DropReason }
  | { ok: false; ignored: true };

/**
 * Reads one object. Kinds kpng does not read are `ignored`. A well-formed
 * Service or EndpointSlice passes the fast check as it is; any other goes
 * through its shape (an object no API server could hold is refused, with a
 * one-line error naming the object and the field:
 * `service default/web spec.ports[0].port: 70000 is out of range`) and
 * read.ts, which reads its values as kube-proxy does and says in `notes`
 * what it skipped or did not know. `as` says which kind the object is,
 * whatever it says (list items carry no kind).
 */
export function parseObject(raw: unknown, as?: Kind): ParseResult {
  if (typeof raw !== "object" || raw === null) return { ok: false, error: "object: not a mapping", reason: "malformed" };
  if (raw instanceof Checked && (as ?? raw.object.kind) === raw.object.kind) return { ok: true, object: raw.object };
  const o = raw as Record<string, unknown>;
  const kind = as ?? o.kind;
  if (typeof kind !== "string" || !Object.hasOwn(shapes, kind)) return { ok: false, ignored: true };
  // Slices and Services are most of a cluster's objects: a hand-written check of the well-formed schema first.
  let fast: K8sObject | null = kind === "EndpointSlice" ? fastSlice(o, kind) : kind === "Service" ? fastService(o, kind) : null;
  if (fast?.kind === "EndpointSlice" && !canonicalFirstAddresses(fast)) fast = null;
  if (fast) return { ok: true, object: finish(fast) };
  const input = o.kind === kind ? o : { ...o, kind };
  const res = v.safeParse(shapes[kind as Kind], input, { abortPipeEarly: true });
  if (!res.success) {
    const issue = res.issues[0];
    return {
      ok: false,
      error: `${objectName(input as never)} ${issuePath(issue) || "object"}: ${issueProblem(issue)}`,
      reason: "malformed",
    };
  }
  const shaped = res.output as K8sObject;
  const read: Read<K8sObject> =
    shaped.kind === "Service" ? readService(shaped) : shaped.kind === "EndpointSlice" ? readSlice(shaped) : { object: shaped, notes: [] };
  if ("drop" in read)
    return { ok: false, error: `${objectName(shaped)} ${read.drop.field}: ${read.drop.message}`, reason: read.drop.reason };
  const object = finish(read.object);
  return read.notes.length ? { ok: true, object, notes: read.notes } : { ok: true, object };
}

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

/** The last touches to an object read (its namespace defaulted, the last-applied annotation dropped): a decoder that checks as it reads does them too. */
export function finish<T extends K8sObject>(obj: T): T {
  if (obj.kind !== "Node" && !obj.metadata.namespace) obj.metadata.namespace = "default";
  // Huge, rewritten by every `kubectl apply`, read by nobody here (the output is a copy: raw stays whole).
  if (obj.metadata.annotations && LAST_APPLIED in obj.metadata.annotations) delete obj.metadata.annotations[LAST_APPLIED];
  return obj;
}
