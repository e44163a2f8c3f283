// EndpointSliceSchema (objects.ts), checked by hand: at 10k services the
// first list holds 100,000 endpoints, and valibot's generic walk over them
// (megamorphic `~run` calls, cold at start-up) costs several times this
// straight code. The schema stays the definition: this accepts exactly what
// it accepts and returns the same output (test/brain/fast-slice.test.ts runs
// both over a table of valid and invalid slices); on anything it does not
// accept it returns null and valibot, run next, names the field and the why.

import type { K8sEndpointSlice } from "./objects.ts";

type Obj = Record<string, unknown>;
/** what the schema's `v.object` accepts: any non-null object (arrays too) */
const isObj = (x: unknown): x is Obj => typeof x === "object" && x !== null;
const FAIL = Symbol("invalid");
type Out<T> = T | typeof FAIL;

/** v.optional(v.string()) */
function optString(o: Obj, key: string, out: Obj): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x !== undefined && typeof x !== "string") return false;
  out[key] = x;
  return true;
}

const optionalString = (x: unknown) => x === undefined || typeof x === "string";

/** v.optional(v.nullable(inner)): absent, undefined and null kept as they are, anything else through `parse` */
function optNullable(o: Obj, key: string, out: Obj, parse: (x: unknown) => Out<unknown>): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x === undefined || x === null) {
    out[key] = x;
    return true;
  }
  const parsed = parse(x);
  if (parsed === FAIL) return false;
  out[key] = parsed;
  return true;
}

/** v.record(v.string(), v.string()) */
function stringMap(x: unknown): Out<Record<string, string>> {
  if (!isObj(x)) return FAIL;
  const m: Record<string, string> = {};
  for (const k in x) {
    if (!Object.hasOwn(x, k) || k === "__proto__" || k === "prototype" || k === "constructor") continue;
    const val = x[k];
    if (typeof val !== "string") return FAIL;
    m[k] = val;
  }
  return m;
}

/** v.optional(v.nullable(v.boolean())) */
function optBool(o: Obj, key: string, out: Obj): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x !== undefined && x !== null && typeof x !== "boolean") return false;
  out[key] = x;
  return true;
}

/** absent, undefined, null, true, false */
const condCode = (c: Obj, key: string): number => (!(key in c) ? 0 : c[key] === undefined ? 1 : c[key] === null ? 2 : c[key] === true ? 3 : c[key] === false ? 4 : -1);
/**
 * An endpoint's conditions are one of 125 values: each is made once and
 * shared, frozen (100,000 endpoints at 10k services, ~6 MB of equal objects).
 */
const sharedConditions: Array<Readonly<Obj> | undefined> = [];

function conditions(c: Obj): Out<Obj> {
  const r = condCode(c, "ready");
  const s = condCode(c, "serving");
  const t = condCode(c, "terminating");
  if (r < 0 || s < 0 || t < 0) return FAIL;
  const i = r * 25 + s * 5 + t;
  let co = sharedConditions[i];
  if (!co) {
    const o: Obj = {};
    optBool(c, "ready", o);
    optBool(c, "serving", o);
    optBool(c, "terminating", o);
    sharedConditions[i] = co = Object.freeze(o);
  }
  return co as Obj;
}

function metadata(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const name = x.name;
  if (typeof name !== "string" || name.length < 1) return FAIL;
  const out: Obj = { name };
  if (!optString(x, "namespace", out) || !optNullable(x, "labels", out, stringMap) || !optNullable(x, "annotations", out, stringMap)) return FAIL;
  return out;
}

/** hintList's inner part: v.array(v.object({ name: v.string() })) */
function hints(x: unknown): Out<Array<{ name: string }>> {
  if (!Array.isArray(x)) return FAIL;
  const list: Array<{ name: string }> = [];
  for (const h of x) {
    if (!isObj(h) || typeof h.name !== "string") return FAIL;
    list.push({ name: h.name });
  }
  return list;
}

function endpoint(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const addrs = x.addresses;
  if (!Array.isArray(addrs) || addrs.length < 1) return FAIL;
  for (const a of addrs) if (typeof a !== "string") return FAIL;
  const out: Obj = { addresses: addrs.slice() };
  if ("conditions" in x && x.conditions !== undefined) {
    const c = x.conditions;
    if (!isObj(c)) return FAIL;
    const co = conditions(c);
    if (co === FAIL) return FAIL;
    out.conditions = co;
  } else if ("conditions" in x) out.conditions = undefined;
  if (!optString(x, "hostname", out) || !optString(x, "nodeName", out) || !optString(x, "zone", out)) return FAIL;
  if ("hints" in x && x.hints !== undefined) {
    const h = x.hints;
    if (!isObj(h)) return FAIL;
    const ho: Obj = {};
    if (!optNullable(h, "forZones", ho, hints) || !optNullable(h, "forNodes", ho, hints)) return FAIL;
    out.hints = ho;
  } else if ("hints" in x) out.hints = undefined;
  if ("targetRef" in x && x.targetRef !== undefined) {
    const t = x.targetRef;
    if (!isObj(t)) return FAIL;
    const { kind, name, namespace } = t;
    if (!optionalString(kind) || !optionalString(name) || !optionalString(namespace)) return FAIL;
    if (kind === "Pod" && name) out.pod = name;
  }
  return out;
}

const PROTOCOLS = new Set(["TCP", "UDP", "SCTP"]);

function port(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const out: Obj = {};
  if ("name" in x) {
    const n = x.name;
    if (n !== undefined && n !== null && typeof n !== "string") return FAIL;
    out.name = n;
  }
  // protocol: v.optional(picklist, "TCP"): absent or undefined gives the default
  const p = x.protocol === undefined ? "TCP" : x.protocol;
  if (typeof p !== "string" || !PROTOCOLS.has(p)) return FAIL;
  out.protocol = p;
  if ("port" in x) {
    const n = x.port;
    if (n !== undefined && n !== null && (typeof n !== "number" || !Number.isInteger(n) || n < 1 || n > 65535)) return FAIL;
    out.port = n;
  }
  return out;
}

/** v.optional(v.nullable(v.array(item))) */
function optList(o: Obj, key: string, item: (x: unknown) => Out<Obj>, out: Obj): boolean {
  if (!(key in o)) return true;
  const x = o[key];
  if (x === undefined || x === null) {
    out[key] = x;
    return true;
  }
  if (!Array.isArray(x)) return false;
  const list: Obj[] = [];
  for (let i = 0; i < x.length; i++) {
    const r = item(x[i]);
    if (r === FAIL) return false;
    list.push(r);
  }
  out[key] = list;
  return true;
}

const ADDRESS_TYPES = new Set(["IPv4", "IPv6", "FQDN"]);

/** EndpointSliceSchema's output for `raw`, or null when it is not valid (valibot then says why). */
export function fastSlice(raw: Obj): K8sEndpointSlice | null {
  if (raw.kind !== "EndpointSlice") return null;
  const meta = metadata(raw.metadata);
  if (meta === FAIL) return null;
  if (typeof raw.addressType !== "string" || !ADDRESS_TYPES.has(raw.addressType)) return null;
  const out: Obj = { kind: "EndpointSlice", metadata: meta, addressType: raw.addressType };
  if (!optList(raw, "endpoints", endpoint, out) || !optList(raw, "ports", port, out)) return null;
  return out as K8sEndpointSlice;
}
