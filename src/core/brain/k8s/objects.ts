// The few fields of Kubernetes objects kpng reads, as valibot schemas: one
// definition gives both the TypeScript type and the run-time validation of
// every object that comes from a file or the API server. Unknown fields are
// allowed (real objects carry many we do not read) and left out of the
// output: the brain keeps 20,000 objects at 10k services, and a uid, a
// managedFields entry or an ownerReference kept in each costs memory and
// makes changes that mean nothing here look like changes.

import * as v from "valibot";
import { fastService } from "./fast-service.ts";
import { fastSlice } from "./fast-slice.ts";
import { isCIDR, isIP, isIPv4, isIPv6 } from "./ip.ts";
import { issuePath, issueProblem } from "../../issues.ts";

// ip.ts's hand-written checks (node:net's answers, as kube-proxy's netutils:
// no leading zeros), not valibot's v.ip regex: 10,000 cluster IPs are checked
// at start-up. Unions are avoided for the same reason: every branch that
// fails first costs an issue object.
const ip = v.pipe(v.string(), v.check(isIP, "is not a valid IP address"));
/** "None" (headless), "" (not allocated yet) or an IP */
const clusterIP = (allowEmpty: boolean) =>
  v.pipe(v.string("is not a valid IP address"), v.check((s) => s === "None" || (allowEmpty && s === "") || isIP(s), "is not a valid IP address"));
const cidr = v.pipe(v.string(), v.check(isCIDR, "is not a valid CIDR"));
const port = v.pipe(v.number("must be a number"), v.integer("must be an integer"), v.minValue(1, "is out of range"), v.maxValue(65535, "is out of range"));
const nodePort = v.pipe(v.number(), v.integer(), v.minValue(0, "is out of range"), v.maxValue(65535, "is out of range"));
const protocol = v.optional(v.picklist(["TCP", "UDP", "SCTP"], "must be TCP, UDP or SCTP"), "TCP");
const labels = v.optional(v.nullable(v.record(v.string(), v.string())));
const list = <T extends v.GenericSchema>(item: T) => v.optional(v.nullable(v.array(item)));

const metadata = v.object({
  name: v.pipe(v.string("is required"), v.minLength(1, "is required")),
  namespace: v.optional(v.string()),
  labels,
  annotations: labels,
});

export const ServiceSchema = v.object({
  kind: v.literal("Service"),
  metadata,
  spec: v.object({
    type: v.optional(v.picklist(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"], "must be ClusterIP, NodePort, LoadBalancer or ExternalName"), "ClusterIP"),
    clusterIP: v.optional(clusterIP(true)),
    clusterIPs: list(clusterIP(false)),
    ipFamilies: list(v.picklist(["IPv4", "IPv6"], "must be IPv4 or IPv6")),
    externalIPs: list(ip),
    loadBalancerSourceRanges: list(cidr),
    ports: list(
      v.object({
        name: v.optional(v.string()),
        protocol,
        port,
        targetPort: v.optional(v.union([port, v.pipe(v.string(), v.minLength(1))], "must be a port number or name")),
        nodePort: v.optional(nodePort),
      }),
    ),
    sessionAffinity: v.optional(v.picklist(["None", "ClientIP"], "must be None or ClientIP")),
    sessionAffinityConfig: v.optional(
      v.object({
        clientIP: v.optional(v.object({ timeoutSeconds: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1, "is out of range"), v.maxValue(86400, "is out of range"))) })),
      }),
    ),
    externalTrafficPolicy: v.optional(v.picklist(["Cluster", "Local"], "must be Cluster or Local")),
    internalTrafficPolicy: v.optional(v.picklist(["Cluster", "Local"], "must be Cluster or Local")),
    healthCheckNodePort: v.optional(nodePort),
  }),
  status: v.optional(
    v.object({
      loadBalancer: v.optional(
        v.object({
          ingress: list(v.object({ ip: v.optional(ip), hostname: v.optional(v.string()), ipMode: v.optional(v.picklist(["VIP", "Proxy"], "must be VIP or Proxy")) })),
        }),
      ),
    }),
  ),
});

const hintList = list(v.object({ name: v.string() }));

export const EndpointSliceSchema = v.object({
  kind: v.literal("EndpointSlice"),
  metadata,
  addressType: v.picklist(["IPv4", "IPv6", "FQDN"], "must be IPv4, IPv6 or FQDN"),
  endpoints: list(
    v.pipe(
      v.object({
        addresses: v.pipe(v.array(v.string()), v.minLength(1, "must have at least one address")),
        conditions: v.optional(
          v.object({
            ready: v.optional(v.nullable(v.boolean())),
            serving: v.optional(v.nullable(v.boolean())),
            terminating: v.optional(v.nullable(v.boolean())),
          }),
        ),
        hostname: v.optional(v.string()),
        nodeName: v.optional(v.string()),
        zone: v.optional(v.string()),
        hints: v.optional(v.object({ forZones: hintList, forNodes: hintList })),
        targetRef: v.optional(v.object({ kind: v.optional(v.string()), name: v.optional(v.string()), namespace: v.optional(v.string()) })),
      }),
      // Of targetRef only a Pod's name is read (the endpoint's key): an object per
      // endpoint kept for it was ~6 MB at 10k services.
      v.transform(({ targetRef, ...ep }) => (targetRef?.kind === "Pod" && targetRef.name ? { ...ep, pod: targetRef.name } : ep) as typeof ep & { pod?: string }),
    ),
  ),
  ports: list(
    v.object({
      name: v.optional(v.nullable(v.string())),
      protocol,
      port: v.optional(v.nullable(port)),
    }),
  ),
});

export const NodeSchema = v.object({
  kind: v.literal("Node"),
  metadata: v.object({ ...metadata.entries, deletionTimestamp: v.optional(v.string()) }),
  // the health check reads the to-be-deleted taint
  spec: v.optional(v.object({ taints: list(v.object({ key: v.optional(v.string()) })) })),
  status: v.optional(v.object({ addresses: list(v.object({ type: v.string(), address: v.string() })) })),
});

export type K8sService = v.InferOutput<typeof ServiceSchema>;
export type K8sEndpointSlice = v.InferOutput<typeof EndpointSliceSchema>;
export type K8sNode = v.InferOutput<typeof NodeSchema>;
export type K8sObject = K8sService | K8sEndpointSlice | K8sNode;
export type Kind = K8sObject["kind"];
export const kinds: readonly Kind[] = ["Service", "EndpointSlice", "Node"];

const LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration";

const schemas = { Service: ServiceSchema, EndpointSlice: EndpointSliceSchema, Node: NodeSchema } as const;

/** `service default/web` — how logs and errors name an object. */
export function objectName(obj: { kind?: unknown; metadata?: { namespace?: unknown; name?: unknown } }): string {
  const kind = typeof obj.kind === "string" ? obj.kind.charAt(0).toLowerCase() + obj.kind.slice(1) : "object";
  const ns = obj.metadata?.namespace;
  const name = obj.metadata?.name;
  return `${kind} ${typeof ns === "string" && ns ? `${ns}/` : ""}${typeof name === "string" ? name : "<unnamed>"}`;
}

/** Addresses of an IPv4/IPv6 slice must be IPs of that family (FQDN slices are not read). */
function sliceAddressError(slice: K8sEndpointSlice): string | null {
  if (slice.addressType === "FQDN" || !slice.endpoints) return null;
  // Indexed loops and one family's check: 100,000 addresses at 10k services, at start-up.
  const isOfFamily = slice.addressType === "IPv4" ? isIPv4 : isIPv6;
  for (let i = 0; i < slice.endpoints.length; i++) {
    const addresses = slice.endpoints[i].addresses;
    for (let j = 0; j < addresses.length; j++) {
      if (!isOfFamily(addresses[j])) return `endpoints[${i}].addresses[${j}]: "${addresses[j]}" is not an ${slice.addressType} address`;
    }
  }
  return null;
}

export type ParseResult = { ok: true; object: K8sObject } | { ok: false; error: string } | { ok: false; ignored: true };

/**
 * Validates one object. Kinds kpng does not read are `ignored`; an invalid
 * object gives a one-line error naming the object and the field:
 * `service default/web spec.ports[0].port: 70000 is out of range`.
 * `as` says which kind the object is, whatever it says (list items carry no kind).
 */
export function parseObject(raw: unknown, as?: Kind): ParseResult {
  if (typeof raw !== "object" || raw === null) return { ok: false, error: "object: not a mapping" };
  const o = raw as Record<string, unknown>;
  const kind = as ?? o.kind;
  if (typeof kind !== "string" || !Object.hasOwn(schemas, kind)) return { ok: false, ignored: true };
  // Slices and Services are most of a cluster's objects: a hand-written check of the same schema first.
  const fast = kind === "EndpointSlice" ? fastSlice(o, kind) : kind === "Service" ? fastService(o, kind) : null;
  const input = fast || o.kind === kind ? o : { ...o, kind };
  const res = fast ? ({ success: true, output: fast } as const) : v.safeParse(schemas[kind as Kind], input, { abortPipeEarly: true });
  if (res.success) {
    const obj = res.output as K8sObject;
    if (obj.kind !== "Node" && !obj.metadata.namespace) obj.metadata.namespace = "default";
    // Huge, rewritten by every `kubectl apply`, read by nobody here (the output is a copy: raw stays whole).
    if (obj.metadata.annotations && LAST_APPLIED in obj.metadata.annotations) delete obj.metadata.annotations[LAST_APPLIED];
    const err = obj.kind === "EndpointSlice" ? sliceAddressError(obj) : null;
    return err ? { ok: false, error: `${objectName(obj)} ${err}` } : { ok: true, object: obj };
  }
  const issue = res.issues[0];
  return { ok: false, error: `${objectName(input as never)} ${issuePath(issue) || "object"}: ${issueProblem(issue)}` };
}
