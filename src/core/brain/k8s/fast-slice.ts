// EndpointSliceSchema (objects.ts), checked by hand: at 10k services the
// first list holds 100,000 endpoints, and valibot's generic walk over them
// costs several times this straight code (fast-check.ts). The schema stays
// the definition: this accepts exactly what it accepts and returns the same
// output (test/brain/fast-slice.test.ts runs both over a table of valid and
// invalid slices); on anything it does not accept (not well-formed: an
// unknown value, an address not as kube-proxy prints it, or invalid) it
// returns null and objects.ts takes the slow path: valibot's shape (which
// names the field and the why of what no API server holds), then read.ts.

import {
  FAIL,
  isObj,
  listOf,
  metadata,
  nullable,
  oneOf,
  opt,
  optString,
  port as portNumber,
  protocol,
  type Obj,
  type Out,
} from "./fast-check.ts";
import type { K8sEndpointSlice } from "./objects.ts";

const optionalString = (x: unknown) => x === undefined || typeof x === "string";

/** absent, undefined, null, true, false */
const condCode = (c: Obj, key: string): number =>
  !(key in c) ? 0 : c[key] === undefined ? 1 : c[key] === null ? 2 : c[key] === true ? 3 : c[key] === false ? 4 : -1;
/** the codes of a condition that is there: true, false */
export const CONDITION_TRUE = 3;
export const CONDITION_FALSE = 4;
/** what each code stands for (0: absent, never written) */
const CONDITION_VALUES = [undefined, undefined, null, true, false];
/**
 * An endpoint's conditions are one of 125 values: each is made once and
 * shared, frozen (100,000 endpoints at 10k services, an equal object each otherwise).
 */
const shared: Array<Readonly<Obj> | undefined> = [];

/** The shared conditions object of ready, serving and terminating given by their codes (condCode's). */
export function sharedConditions(r: number, s: number, t: number): Readonly<Obj> {
  const i = r * 25 + s * 5 + t;
  let co = shared[i];
  if (!co) {
    const o: Obj = {};
    if (r) o.ready = CONDITION_VALUES[r];
    if (s) o.serving = CONDITION_VALUES[s];
    if (t) o.terminating = CONDITION_VALUES[t];
    shared[i] = co = Object.freeze(o);
  }
  return co;
}

function conditions(c: Obj): Out<Obj> {
  const r = condCode(c, "ready");
  const s = condCode(c, "serving");
  const t = condCode(c, "terminating");
  if (r < 0 || s < 0 || t < 0) return FAIL;
  return sharedConditions(r, s, t) as Obj;
}

/** hintList's inner part: v.array(v.object({ name: v.string() })) */
const hints = nullable(listOf((h) => (isObj(h) && typeof h.name === "string" ? { name: h.name } : FAIL)));

/**
 * The endpoint nearly every slice holds (conditions, node, zone, a Pod; no
 * hostname, no hints), as one literal: the brain keeps 100,000 of them at
 * 10k services, and JSC sizes the objects an allocation site makes for
 * every field it may get (seven below: 80-byte cells), a literal of five
 * for its five (64). Undefined for any other endpoint: the general path.
 */
function commonEndpoint(x: Obj, addrs: string[]): Obj | undefined {
  if ("hostname" in x || "hints" in x) return undefined;
  const { conditions: c, nodeName, zone, targetRef: t } = x;
  if (!isObj(c) || typeof nodeName !== "string" || typeof zone !== "string" || !isObj(t)) return undefined;
  const { kind, name, namespace } = t;
  if (kind !== "Pod" || typeof name !== "string" || !name || !optionalString(namespace)) return undefined;
  const co = conditions(c);
  if (co === FAIL) return undefined;
  return { addresses: addrs.slice(), conditions: co, nodeName, zone, pod: name };
}

function endpoint(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const addrs = x.addresses;
  if (!Array.isArray(addrs) || addrs.length < 1) return FAIL;
  for (const a of addrs) if (typeof a !== "string") return FAIL;
  const common = commonEndpoint(x, addrs);
  if (common) return common;
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
    if (!opt(h, "forZones", ho, hints) || !opt(h, "forNodes", ho, hints)) return FAIL;
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

function port(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const out: Obj = {};
  if ("name" in x) {
    const n = x.name;
    if (n !== undefined && n !== null && typeof n !== "string") return FAIL;
    out.name = n;
  }
  const p = protocol(x.protocol);
  if (p === FAIL) return FAIL;
  out.protocol = p;
  if ("port" in x) {
    const n = x.port;
    if (n !== undefined && n !== null && portNumber(n) === FAIL) return FAIL;
    out.port = n;
  }
  return out;
}

const endpoints = nullable(listOf(endpoint));
const ports = nullable(listOf(port));
const addressType = oneOf(["IPv4", "IPv6", "FQDN"]);

/**
 * EndpointSliceSchema's output for `raw`, or null when it is not valid
 * (valibot then says why). `kind` is what the object is said to be: list
 * items carry none, their list says.
 */
export function fastSlice(raw: Obj, kind: unknown = raw.kind): K8sEndpointSlice | null {
  if (kind !== "EndpointSlice") return null;
  const meta = metadata(raw.metadata);
  if (meta === FAIL) return null;
  const type = addressType(raw.addressType);
  if (type === FAIL) return null;
  const out: Obj = { kind: "EndpointSlice", metadata: meta, addressType: type };
  if (!opt(raw, "endpoints", out, endpoints) || !opt(raw, "ports", out, ports)) return null;
  return out as K8sEndpointSlice;
}
