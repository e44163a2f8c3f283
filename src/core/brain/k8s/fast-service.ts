// ServiceSchema (objects.ts), checked by hand as fast-slice.ts checks slices:
// valibot's generic walk costs several times this straight code at start-up,
// on the thread that reads the list (see docs/results/2026-11.md). The schema
// stays the definition: this
// accepts exactly what it accepts and returns the same output
// (test/brain/fast-service.test.ts runs both over a table of valid and
// invalid services); on anything it does not accept (not well-formed: an
// unknown value, an address not as kube-proxy prints it, or invalid) it
// returns null and objects.ts takes the slow path: valibot's shape (which
// names the field and the why of what no API server holds), then read.ts.

import {
  FAIL,
  intIn,
  isObj,
  listOf,
  metadata,
  nullable,
  objectWith,
  oneOf,
  opt,
  optString,
  port,
  protocol,
  stringWhere,
  type Obj,
  type Out,
} from "./fast-check.ts";
import { isCanonicalCIDR, isCanonicalIP } from "./ip-sloppy.ts";
import type { K8sService } from "./objects.ts";

const ip = stringWhere(isCanonicalIP);
const nodePort = intIn(0, 65535);
// the picklists, shared by the protobuf reader (sources/protobuf/checked.ts)
export const policy = oneOf(["Cluster", "Local"]);
export const affinity = oneOf(["None", "ClientIP"]);
const ipMode = oneOf(["VIP", "Proxy"]);
export const serviceType = oneOf(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]);
export const ipFamily = oneOf(["IPv4", "IPv6"]);

/** targetPort: v.union([port, a non-empty string]) (shared by the protobuf reader) */
export const targetPort = (x: unknown): Out<number | string> => (typeof x === "string" ? (x.length ? x : FAIL) : port(x));

function servicePort(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  const out: Obj = {};
  if (!optString(x, "name", out)) return FAIL;
  const p = protocol(x.protocol);
  if (p === FAIL || port(x.port) === FAIL) return FAIL; // port is required: absent is undefined, no number
  out.protocol = p;
  out.port = x.port;
  if (!opt(x, "targetPort", out, targetPort) || !opt(x, "nodePort", out, nodePort)) return FAIL;
  return out;
}

/** objects.ts's `list`: v.optional(v.nullable(v.array(item))) */
const lists = {
  clusterIPs: nullable(listOf(stringWhere((s) => s === "None" || isCanonicalIP(s)))),
  ipFamilies: nullable(listOf(ipFamily)),
  externalIPs: nullable(listOf(ip)),
  loadBalancerSourceRanges: nullable(listOf(stringWhere(isCanonicalCIDR))),
  ports: nullable(listOf(servicePort)),
};
const LISTS = Object.keys(lists) as Array<keyof typeof lists>;

/** "None" (headless), "" (not allocated yet) or an IP; a list of them holds no "" */
const clusterIP = stringWhere((s) => s === "None" || s === "" || isCanonicalIP(s));
/** sessionAffinityConfig (shared by the protobuf reader: objectWith shares its empty outputs) */
export const affinityConfig = objectWith("clientIP", objectWith("timeoutSeconds", intIn(1, 86400)));

function spec(x: unknown): Out<Obj> {
  if (!isObj(x)) return FAIL;
  // type: v.optional(picklist, "ClusterIP"): absent and undefined give the default
  const type = serviceType(x.type === undefined ? "ClusterIP" : x.type);
  if (type === FAIL) return FAIL;
  const out: Obj = { type };
  if (!opt(x, "clusterIP", out, clusterIP)) return FAIL;
  for (const key of LISTS) if (!opt(x, key, out, lists[key])) return FAIL;
  if (
    !opt(x, "sessionAffinity", out, affinity) ||
    !opt(x, "sessionAffinityConfig", out, affinityConfig) ||
    !opt(x, "externalTrafficPolicy", out, policy) ||
    !opt(x, "internalTrafficPolicy", out, policy) ||
    !opt(x, "healthCheckNodePort", out, nodePort)
  )
    return FAIL;
  return out;
}

const ingress = listOf((x): Out<Obj> => {
  const out: Obj = {};
  return isObj(x) && opt(x, "ip", out, ip) && optString(x, "hostname", out) && opt(x, "ipMode", out, ipMode) ? out : FAIL;
});
/** status (shared by the protobuf reader, as affinityConfig) */
export const status = objectWith("loadBalancer", objectWith("ingress", nullable(ingress)));

/**
 * ServiceSchema's output for `raw`, or null when it is not valid (valibot
 * then says why). `kind` is what the object is said to be: list items carry
 * none, their list says.
 */
export function fastService(raw: Obj, kind: unknown = raw.kind): K8sService | null {
  if (kind !== "Service") return null;
  const meta = metadata(raw.metadata);
  if (meta === FAIL) return null;
  const sp = spec(raw.spec);
  if (sp === FAIL) return null;
  const out: Obj = { kind: "Service", metadata: meta, spec: sp };
  if (!opt(raw, "status", out, status)) return null;
  return out as K8sService;
}
