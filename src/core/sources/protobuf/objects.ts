// Services, EndpointSlices, Nodes and Statuses decoded from protobuf into
// the shape their JSON has (what JSON.parse gives for the same object from
// the same API server), so that one reader, parseObject and read.ts, reads
// both: only the fields kpng reads are decoded, the rest (managedFields,
// selectors, conditions, images...) skipped in place. Each message is a
// table of its fields (brain/k8s/fields.ts), the Service's those of
// brain/k8s/service-fields.ts; compile.ts makes the decoders of them. Field
// numbers are those of Kubernetes' generated.proto (k8s.io/api core/v1 and
// discovery/v1, k8s.io/apimachinery meta/v1 and util/intstr); presences
// (fields.ts's Presence) those of its types.go.

import { proto } from "../../brain/k8s/fields.ts";
import { SERVICE_SPEC, SERVICE_STATUS } from "../../brain/k8s/service-fields.ts";
import { decoderOf, type Decode, type Raw } from "./compile.ts";
import { asBuffer, key, LEN, ProtoError, Reader } from "./wire.ts";

export type { Raw } from "./compile.ts";

/** ObjectMeta */
export const OBJECT_META = {
  name: proto(1, "string"),
  namespace: proto(3, "atom"),
  resourceVersion: proto(6, "string"),
  deletionTimestamp: proto(9, "time", "pointer"),
  labels: proto(11, "map"),
  annotations: proto(12, "map"),
};

/** Service: metadata 1, spec 2, status 3 */
const SERVICE = { metadata: proto(1, OBJECT_META), spec: proto(2, SERVICE_SPEC), status: SERVICE_STATUS };

// -- EndpointSlice (discovery/v1)

/** EndpointConditions (all *bool) */
const CONDITIONS = { ready: proto(1, "bool", "pointer"), serving: proto(2, "bool", "pointer"), terminating: proto(3, "bool", "pointer") };
/** ForZone / ForNode (name: no omitempty) */
const NAMED = { name: proto(1, "atom", "always") };
/** EndpointHints */
const HINTS = { forZones: proto(1, NAMED, "omitempty", true), forNodes: proto(2, NAMED, "omitempty", true) };
/** ObjectReference */
const OBJECT_REFERENCE = { kind: proto(1, "atom"), namespace: proto(2, "atom"), name: proto(3, "string") };
/** Endpoint (addresses: no omitempty, so a nil list is null) */
const ENDPOINT = {
  addresses: proto(1, "string", "always", true),
  conditions: proto(2, CONDITIONS),
  hostname: proto(3, "string", "pointer"),
  targetRef: proto(4, OBJECT_REFERENCE),
  nodeName: proto(6, "atom", "pointer"),
  zone: proto(7, "atom", "pointer"),
  hints: proto(8, HINTS),
};
/** EndpointPort (all pointers) */
const ENDPOINT_PORT = { name: proto(1, "atom", "pointer"), protocol: proto(2, "atom", "pointer"), port: proto(3, "int32", "pointer") };
/** EndpointSlice (addressType: no omitempty) */
const ENDPOINT_SLICE = {
  metadata: proto(1, OBJECT_META),
  endpoints: proto(2, ENDPOINT, "omitempty", true),
  ports: proto(3, ENDPOINT_PORT, "omitempty", true),
  addressType: proto(4, "atom", "always"),
};

// -- Node (core/v1)

/** Taint (key: no omitempty) */
const TAINT = { key: proto(1, "atom", "always") };
/** NodeAddress (no omitempty) */
const NODE_ADDRESS = { type: proto(1, "atom", "always"), address: proto(2, "string", "always") };
/** NodeSpec (detectLocalMode NodeCIDR reads podCIDRs; podCIDR 1 is always its first) */
const NODE_SPEC = { taints: proto(5, TAINT, "omitempty", true), podCIDRs: proto(7, "string", "omitempty", true) };
/** NodeStatus */
const NODE_STATUS = { addresses: proto(5, NODE_ADDRESS, "omitempty", true) };
const NODE = { metadata: proto(1, OBJECT_META), spec: proto(2, NODE_SPEC), status: proto(3, NODE_STATUS) };

// -- Status (meta/v1): what a watch's ERROR event and a refused request carry

/** Status (code: no omitempty) */
const STATUS = { status: proto(2, "string"), message: proto(3, "string"), reason: proto(4, "string"), code: proto(6, "int32", "always") };

export const objectMeta = decoderOf(OBJECT_META);

/** The decoder of each kind kpng reads, by the kind a runtime.Unknown names. */
export const decoders: Record<string, Decode> = {
  Service: decoderOf(SERVICE),
  EndpointSlice: decoderOf(ENDPOINT_SLICE),
  Node: decoderOf(NODE),
  Status: decoderOf(STATUS),
};

/** `name` and `namespace` of an object whose bytes did not decode, if its metadata (field 1, written first) did. */
export function nameOf(buf: Uint8Array, start: number, end: number): Raw {
  try {
    const r = new Reader(asBuffer(buf), start);
    if (r.uint32() !== key(1, LEN)) return {};
    const mend = r.sub(end);
    const meta = objectMeta(r, mend);
    return { name: meta.name, namespace: meta.namespace };
  } catch (err) {
    if (err instanceof ProtoError || err instanceof RangeError) return {};
    throw err;
  }
}
