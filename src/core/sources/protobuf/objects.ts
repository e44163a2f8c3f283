// Services, EndpointSlices, Nodes and Statuses decoded from protobuf into
// the shape their JSON has (what JSON.parse gives for the same object from
// the same API server), so that one reader, parseObject and read.ts, reads
// both: only the fields kpng reads are decoded, the rest (managedFields,
// selectors, conditions, images...) skipped in place. Field numbers are
// those of Kubernetes' generated.proto (k8s.io/api core/v1 and discovery/v1,
// k8s.io/apimachinery meta/v1 and util/intstr).
//
// Go's protobuf encoder writes every non-pointer field, zero or not; its JSON
// encoder leaves out the zero ones tagged omitempty. So a zero string or
// number is dropped here where the JSON tag says omitempty, kept where it
// does not (a port's `port`, a slice's `addressType`), and a pointer field
// (proto2 presence) is kept whenever it is on the wire, as JSON keeps it.

import { asBuffer, key, LEN, ProtoError, Reader } from "./wire.ts";

export type Raw = Record<string, unknown>;
type Decode = (r: Reader, end: number) => Raw;

// Keys are written as numbers (field n, wire type w: n * 8 + w; 2 for strings
// and messages, 0 for numbers and booleans): a switch over constants is a
// jump table, where `case key(1, 2):` would call a function per case tried,
// at start-up, before the JIT has made anything of it.
const F = (n: number) => key(n, LEN);

/** a string field tagged omitempty: "" is left out */
function optString(o: Raw, name: string, r: Reader, end: number) {
  const s = r.string(end);
  if (s !== "") o[name] = s;
}

/** the same, for a value that recurs across objects (Reader.atom) */
function optAtom(o: Raw, name: string, r: Reader, end: number) {
  const s = r.atom(end);
  if (s !== "") o[name] = s;
}

function push(o: Raw, name: string, value: unknown) {
  const list = o[name] as unknown[] | undefined;
  if (list) list.push(value);
  else o[name] = [value];
}

/** map<string,string> entry: key = 1, value = 2, added to `map` */
export function mapEntry(map: Record<string, string>, r: Reader, end: number) {
  let k = "";
  let value = "";
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) k = r.atom(end);
    else if (t === 18) value = r.string(end);
    else r.skip(t, end);
  }
  r.done(end);
  map[k] = value;
}

/** metav1.Time (seconds = 1, nanos = 2) as its JSON: RFC 3339, whole seconds, UTC */
function time(r: Reader, end: number): string {
  let seconds = 0;
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 8) seconds = r.int64();
    else r.skip(t, end);
  }
  r.done(end);
  const date = new Date(seconds * 1000);
  // past what a Date holds (Go's JSON cannot write such a time either): bad bytes for this object, not for the answer
  if (Number.isNaN(date.getTime())) throw new ProtoError(`a time out of range (${seconds} s)`);
  return date.toISOString().replace(/\.\d{3}Z$/, "Z");
}

/** ObjectMeta: name 1, namespace 3, resourceVersion 6, deletionTimestamp 9, labels 11, annotations 12 */
export function objectMeta(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        optString(o, "name", r, end);
        break;
      case 26:
        optAtom(o, "namespace", r, end);
        break;
      case 50:
        optString(o, "resourceVersion", r, end);
        break;
      case 74:
        o.deletionTimestamp = time(r, r.sub(end));
        break;
      case 90:
        mapEntry((o.labels ??= {}) as Record<string, string>, r, r.sub(end));
        break;
      case 98:
        mapEntry((o.annotations ??= {}) as Record<string, string>, r, r.sub(end));
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/**
 * A message whose fields are all strings (or skipped): `fields[n]` names
 * field n; `keep` those without omitempty; `recur` those whose values recur
 * across objects (Reader.atom).
 */
function strings(fields: Record<number, string>, keep: readonly string[] = [], recur: readonly string[] = []): Decode {
  // indexed by key (small numbers): an array lookup per field
  const names: Array<string | undefined> = [];
  const kept: boolean[] = [];
  const atoms: boolean[] = [];
  for (const [n, name] of Object.entries(fields)) {
    names[F(Number(n))] = name;
    kept[F(Number(n))] = keep.includes(name);
    atoms[F(Number(n))] = recur.includes(name);
  }
  return (r, end) => {
    const o: Raw = {};
    while (r.pos < end) {
      const t = r.uint32();
      const name = names[t];
      if (name === undefined) r.skip(t, end);
      else {
        const s = atoms[t] ? r.atom(end) : r.string(end);
        if (kept[t] || s !== "") o[name] = s;
      }
    }
    r.done(end);
    return o;
  };
}

/** a message with one repeated message field */
function listOf(n: number, name: string, item: Decode): Decode {
  const k = F(n);
  return (r, end) => {
    const o: Raw = {};
    while (r.pos < end) {
      const t = r.uint32();
      if (t === k) push(o, name, item(r, r.sub(end)));
      else r.skip(t, end);
    }
    r.done(end);
    return o;
  };
}

/** An object of a kind with a spec and a status (Service, Node): metadata 1, spec 2, status 3. */
function topLevel(spec: Decode, status: Decode): Decode {
  return (r, end) => {
    const o: Raw = {};
    while (r.pos < end) {
      const t = r.uint32();
      switch (t) {
        case 10:
          o.metadata = objectMeta(r, r.sub(end));
          break;
        case 18:
          o.spec = spec(r, r.sub(end));
          break;
        case 26:
          o.status = status(r, r.sub(end));
          break;
        default:
          r.skip(t, end);
      }
    }
    r.done(end);
    return o;
  };
}

// -- Service (core/v1)

/** IntOrString: type 1 (0 int, 1 string), intVal 2, strVal 3 */
export function intOrString(r: Reader, end: number): number | string {
  let type = 0;
  let int = 0;
  let str = "";
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 8) type = r.int64();
    else if (t === 16) int = r.int32();
    else if (t === 26) str = r.string(end);
    else r.skip(t, end);
  }
  r.done(end);
  return type === 1 ? str : int;
}

/** ServicePort: name 1, protocol 2, port 3 (no omitempty), targetPort 4, nodePort 5 */
function servicePort(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        optAtom(o, "name", r, end);
        break;
      case 18:
        optAtom(o, "protocol", r, end);
        break;
      case 24:
        o.port = r.int32();
        break;
      // IntOrString marshals itself, so JSON has it even when zero
      case 34:
        o.targetPort = intOrString(r, r.sub(end));
        break;
      case 40: {
        const n = r.int32();
        if (n !== 0) o.nodePort = n;
        break;
      }
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** SessionAffinityConfig { clientIP 1: ClientIPConfig { timeoutSeconds 1 (*int32) } } */
export function sessionAffinityConfig(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) {
      const cend = r.sub(end);
      const c: Raw = {};
      while (r.pos < cend) {
        const u = r.uint32();
        if (u === 8) c.timeoutSeconds = r.int32();
        else r.skip(u, cend);
      }
      r.done(cend);
      o.clientIP = c;
    } else r.skip(t, end);
  }
  r.done(end);
  return o;
}

/**
 * ServiceSpec: ports 1, clusterIP 3, type 4, externalIPs 5, sessionAffinity 7,
 * loadBalancerSourceRanges 9, externalTrafficPolicy 11, healthCheckNodePort 12,
 * sessionAffinityConfig 14, clusterIPs 18, ipFamilies 19, internalTrafficPolicy 22 (*string)
 */
function serviceSpec(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        push(o, "ports", servicePort(r, r.sub(end)));
        break;
      case 26:
        optString(o, "clusterIP", r, end);
        break;
      case 34:
        optAtom(o, "type", r, end);
        break;
      case 42:
        push(o, "externalIPs", r.string(end));
        break;
      case 58:
        optAtom(o, "sessionAffinity", r, end);
        break;
      case 74:
        push(o, "loadBalancerSourceRanges", r.string(end));
        break;
      case 90:
        optAtom(o, "externalTrafficPolicy", r, end);
        break;
      case 96: {
        const n = r.int32();
        if (n !== 0) o.healthCheckNodePort = n;
        break;
      }
      case 114:
        o.sessionAffinityConfig = sessionAffinityConfig(r, r.sub(end));
        break;
      case 146:
        push(o, "clusterIPs", r.string(end));
        break;
      case 154:
        push(o, "ipFamilies", r.atom(end));
        break;
      case 178:
        o.internalTrafficPolicy = r.atom(end);
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** LoadBalancerIngress: ip 1, hostname 2, ipMode 3 (*string) */
const ingress = strings({ 1: "ip", 2: "hostname", 3: "ipMode" }, ["ipMode"], ["ipMode"]);
/** LoadBalancerStatus { ingress 1 } */
const loadBalancerStatus = listOf(1, "ingress", ingress);

/** ServiceStatus { loadBalancer 1 } */
export function serviceStatus(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) o.loadBalancer = loadBalancerStatus(r, r.sub(end));
    else r.skip(t, end);
  }
  r.done(end);
  return o;
}

/** Service: metadata 1, spec 2, status 3 */
export const service = topLevel(serviceSpec, serviceStatus);

// -- EndpointSlice (discovery/v1)

/** EndpointConditions: ready 1, serving 2, terminating 3 (all *bool) */
function conditions(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 8:
        o.ready = r.bool();
        break;
      case 16:
        o.serving = r.bool();
        break;
      case 24:
        o.terminating = r.bool();
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** ForZone / ForNode: name 1 (no omitempty) */
function named(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) o.name = r.atom(end);
    else r.skip(t, end);
  }
  r.done(end);
  return o;
}

/** EndpointHints: forZones 1, forNodes 2 */
function hints(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    if (t === 10) push(o, "forZones", named(r, r.sub(end)));
    else if (t === 18) push(o, "forNodes", named(r, r.sub(end)));
    else r.skip(t, end);
  }
  r.done(end);
  return o;
}

/** ObjectReference: kind 1, namespace 2, name 3 (one per endpoint: written out) */
function objectReference(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        optAtom(o, "kind", r, end);
        break;
      case 18:
        optAtom(o, "namespace", r, end);
        break;
      case 26:
        optString(o, "name", r, end);
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** Endpoint: addresses 1, conditions 2, hostname 3 (*), targetRef 4, nodeName 6 (*), zone 7 (*), hints 8 */
function endpoint(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        push(o, "addresses", r.string(end));
        break;
      case 18:
        o.conditions = conditions(r, r.sub(end));
        break;
      case 26:
        o.hostname = r.string(end);
        break;
      case 34:
        o.targetRef = objectReference(r, r.sub(end));
        break;
      case 50:
        o.nodeName = r.atom(end);
        break;
      case 58:
        o.zone = r.atom(end);
        break;
      case 66:
        o.hints = hints(r, r.sub(end));
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  // no omitempty: a nil list is null in JSON
  o.addresses ??= null;
  return o;
}

/** EndpointPort: name 1 (*string), protocol 2 (*string), port 3 (*int32) */
function endpointPort(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        o.name = r.atom(end);
        break;
      case 18:
        o.protocol = r.atom(end);
        break;
      case 24:
        o.port = r.int32();
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** EndpointSlice: metadata 1, endpoints 2, ports 3, addressType 4 (no omitempty) */
export function endpointSlice(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 10:
        o.metadata = objectMeta(r, r.sub(end));
        break;
      case 18:
        push(o, "endpoints", endpoint(r, r.sub(end)));
        break;
      case 26:
        push(o, "ports", endpointPort(r, r.sub(end)));
        break;
      case 34:
        o.addressType = r.atom(end);
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

// -- Node (core/v1)

/** Taint: key 1 (no omitempty) */
const taint = strings({ 1: "key" }, ["key"], ["key"]);
/** NodeAddress: type 1, address 2 (no omitempty) */
const nodeAddress = strings({ 1: "type", 2: "address" }, ["type", "address"], ["type"]);
/** NodeSpec { taints 5, podCIDRs 7 } (detectLocalMode NodeCIDR reads podCIDRs; podCIDR 1 is always its first) */
function nodeSpec(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    if (t === F(5)) push(o, "taints", taint(r, r.sub(end)));
    else if (t === F(7)) push(o, "podCIDRs", r.string(end));
    else r.skip(t, end);
  }
  r.done(end);
  return o;
}
/** NodeStatus { addresses 5 } */
const nodeStatus = listOf(5, "addresses", nodeAddress);

/** Node: metadata 1, spec 2, status 3 */
export const node = topLevel(nodeSpec, nodeStatus);

// -- Status (meta/v1): what a watch's ERROR event and a refused request carry

/** Status: status 2, message 3, reason 4, code 6 */
export function status(r: Reader, end: number): Raw {
  const o: Raw = {};
  while (r.pos < end) {
    const t = r.uint32();
    switch (t) {
      case 18:
        optString(o, "status", r, end);
        break;
      case 26:
        optString(o, "message", r, end);
        break;
      case 34:
        optString(o, "reason", r, end);
        break;
      case 48:
        o.code = r.int32();
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  return o;
}

/** The decoder of each kind kpng reads, by the kind a runtime.Unknown names. */
export const decoders: Record<string, (r: Reader, end: number) => Raw> = {
  Service: service,
  EndpointSlice: endpointSlice,
  Node: node,
  Status: status,
};

/** `name` and `namespace` of an object whose bytes did not decode, if its metadata (field 1, written first) did. */
export function nameOf(buf: Uint8Array, start: number, end: number): Raw {
  try {
    const r = new Reader(asBuffer(buf), start);
    if (r.uint32() !== F(1)) return {};
    const mend = r.sub(end);
    const meta = objectMeta(r, mend);
    return { name: meta.name, namespace: meta.namespace };
  } catch (err) {
    if (err instanceof ProtoError || err instanceof RangeError) return {};
    throw err;
  }
}
