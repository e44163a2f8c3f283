// The fields of a Service kpng reads, once (fields.ts says what a table
// holds): the valibot schemas (objects.ts), the hand-written check
// (fast-service.ts), kube-proxy's reading of an unknown enum value (read.ts)
// and the protobuf decoders (sources/protobuf/compile.ts) are made from
// these tables. Field numbers are those of k8s.io/api core/v1
// generated.proto; presences those of its types.go (`json:",omitempty"`, a
// pointer). The order of a table is the order of the output's keys.
//
// A new field is one line here, e.g. `trafficDistribution: optional({ proto:
// 23, wire: "atom", presence: "pointer" }, anyString)`, plus the code in the
// model that reads it.

import * as v from "valibot";
import { FAIL, intIn, listOf, nullable, objectWith, stringWhere } from "./fast-check.ts";
import { anyString, defaulted, enumOf, kind, message, messageChecked, objectCheck, optional, repeated, required } from "./fields.ts";
import { isCanonicalCIDR, isCanonicalIP } from "./ip-sloppy.ts";

// ip-sloppy.ts's hand-written checks, not valibot's v.ip regex: 10,000
// cluster IPs are checked at start-up. Unions are avoided for the same
// reason: every branch that fails first costs an issue object.
const text = v.string("must be a string");
const ip = kind(stringWhere(isCanonicalIP), v.pipe(v.string(), v.check(isCanonicalIP, "is not an IP address in canonical form")), text);
/** "None" (headless), "" (not allocated yet) or an IP; a list of them holds no "" */
const clusterIP = (allowEmpty: boolean) => {
  const ok = (s: string) => s === "None" || (allowEmpty && s === "") || isCanonicalIP(s);
  return kind(stringWhere(ok), v.pipe(v.string("is not a valid IP address"), v.check(ok, "is not a valid IP address")), text);
};
const cidr = kind(stringWhere(isCanonicalCIDR), v.pipe(v.string(), v.check(isCanonicalCIDR, "is not a CIDR in canonical form")), text);
const portSchema = v.pipe(
  v.number("must be a number"),
  v.integer("must be an integer"),
  v.minValue(1, "is out of range"),
  v.maxValue(65535, "is out of range"),
);
export const port = kind(intIn(1, 65535), portSchema, portSchema);
const nodePortSchema = v.pipe(v.number(), v.integer(), v.minValue(0, "is out of range"), v.maxValue(65535, "is out of range"));
const nodePort = kind(intIn(0, 65535), nodePortSchema, nodePortSchema);
export const protocol = enumOf(["TCP", "UDP", "SCTP"]);
export const policy = enumOf(["Cluster", "Local"]);
/**
 * targetPort well-formed: a port number or a name; as an API server may hold
 * it: also 0 or "" (API servers default those to the port)
 */
const targetPort = kind(
  (x) => (typeof x === "string" ? (x.length ? x : FAIL) : port.check(x)),
  v.union([portSchema, v.pipe(v.string(), v.minLength(1))], "must be a port number or name"),
  v.union([nodePortSchema, v.string()], "must be a port number or name"),
);
const timeoutSchema = v.pipe(v.number(), v.integer(), v.minValue(1, "is out of range"), v.maxValue(86400, "is out of range"));

/** ServicePort */
export const SERVICE_PORT = {
  name: optional({ proto: 1, wire: "atom", presence: "omitempty" }, anyString),
  protocol: defaulted({ proto: 2, wire: "atom", presence: "omitempty", default: "TCP" }, protocol),
  port: required({ proto: 3, wire: "int32", presence: "always" }, port),
  // IntOrString marshals itself, so JSON has it even when zero
  targetPort: optional({ proto: 4, wire: "intOrString", presence: "always" }, targetPort),
  nodePort: optional({ proto: 5, wire: "int32", presence: "omitempty" }, nodePort),
};

/** ClientIPConfig */
const CLIENT_IP_CONFIG = {
  timeoutSeconds: optional({ proto: 1, wire: "int32", presence: "pointer" }, kind(intIn(1, 86400), timeoutSchema, timeoutSchema)),
};
/** SessionAffinityConfig */
const AFFINITY_CONFIG = {
  clientIP: optional({ proto: 1, wire: CLIENT_IP_CONFIG, presence: "pointer" }, message(CLIENT_IP_CONFIG)),
};
/** its check shares its empty outputs (objectWith): every ClusterIP Service has one */
const affinityConfig = messageChecked(AFFINITY_CONFIG, objectWith("clientIP", objectWith("timeoutSeconds", intIn(1, 86400))));

/** ServiceSpec */
export const SERVICE_SPEC = {
  type: defaulted(
    {
      proto: 4,
      wire: "atom",
      presence: "omitempty",
      default: "ClusterIP",
      reading: { reading: "proxied for its cluster, node-port, external and load-balancer IPs, externalTrafficPolicy not applied" },
    },
    enumOf(["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"]),
  ),
  clusterIP: optional({ proto: 3, wire: "string", presence: "omitempty" }, clusterIP(true)),
  clusterIPs: repeated({ proto: 18, wire: "string", presence: "omitempty" }, clusterIP(false)),
  ipFamilies: repeated({ proto: 19, wire: "atom", presence: "omitempty" }, enumOf(["IPv4", "IPv6"])),
  externalIPs: repeated({ proto: 5, wire: "string", presence: "omitempty" }, ip),
  loadBalancerSourceRanges: repeated({ proto: 9, wire: "string", presence: "omitempty" }, cidr),
  ports: repeated({ proto: 1, wire: SERVICE_PORT, presence: "omitempty" }, message(SERVICE_PORT)),
  sessionAffinity: optional(
    { proto: 7, wire: "atom", presence: "omitempty", reading: { reading: "no session affinity" } },
    enumOf(["None", "ClientIP"]),
  ),
  sessionAffinityConfig: optional({ proto: 14, wire: AFFINITY_CONFIG, presence: "pointer" }, affinityConfig),
  // "Global": the value's name in 1.5-1.6 (Cluster since), not Local
  externalTrafficPolicy: optional(
    { proto: 11, wire: "atom", presence: "omitempty", reading: { alsoKnown: ["Global"], reading: "Cluster" } },
    policy,
  ),
  internalTrafficPolicy: optional({ proto: 22, wire: "atom", presence: "pointer", reading: { reading: "Cluster" } }, policy),
  healthCheckNodePort: optional({ proto: 12, wire: "int32", presence: "omitempty" }, nodePort),
};

/** LoadBalancerIngress */
const INGRESS = {
  ip: optional({ proto: 1, wire: "string", presence: "omitempty" }, ip),
  hostname: optional({ proto: 2, wire: "string", presence: "omitempty" }, anyString),
  ipMode: optional({ proto: 3, wire: "atom", presence: "pointer" }, enumOf(["VIP", "Proxy"])),
};
/** LoadBalancerStatus */
const LOAD_BALANCER_STATUS = { ingress: repeated({ proto: 1, wire: INGRESS, presence: "omitempty" }, message(INGRESS)) };
/** ServiceStatus */
const SERVICE_STATUS_FIELDS = {
  loadBalancer: optional({ proto: 1, wire: LOAD_BALANCER_STATUS, presence: "omitempty" }, message(LOAD_BALANCER_STATUS)),
};
/** ServiceStatus: its check shares its empty outputs, as affinityConfig's */
export const SERVICE_STATUS = optional(
  { proto: 3, wire: SERVICE_STATUS_FIELDS, presence: "omitempty" },
  messageChecked(SERVICE_STATUS_FIELDS, objectWith("loadBalancer", objectWith("ingress", nullable(listOf(objectCheck(INGRESS)))))),
);
