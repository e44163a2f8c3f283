// Services and EndpointSlices read from protobuf straight into the objects
// the brain keeps, checked as they are read: the output of the fast checks
// (fast-service.ts, fast-slice.ts) and finish() for the same bytes decoded by
// objects.ts, without the object in between. A start-up reads 10,000s of
// them once, in code that runs cold: making the decoded object, then walking
// it to check it and copy it, is work per field that reading the bytes into
// the checked object does once.
//
// What this does not take (a value that is not well-formed, a first address
// that is no IP of its slice's family, a field the fast checks would refuse)
// gives null: the decoder then reads the object into its JSON shape as
// before, and parseObject reads that, with its notes and errors. So this only
// ever takes what the fast path takes, and makes the same object of it
// (test/sources/protobuf-checked.test.ts compares the two over every field
// of full objects replaced by other values). Fields neither keeps are skipped
// unread here, ObjectMeta's deletionTimestamp among them: bad bytes inside
// one refuse the object only on the other path.

import { CONDITION_FALSE, CONDITION_TRUE, sharedConditions } from "../../brain/k8s/fast-slice.ts";
import { FAIL, protocol as checkProtocol, type Obj } from "../../brain/k8s/fast-check.ts";
import type { ProtoTable } from "../../brain/k8s/fields.ts";
import { canonicalFirstAddress, Checked, finish, type K8sEndpointSlice, type K8sService } from "../../brain/k8s/objects.ts";
import { SERVICE_SPEC, SERVICE_STATUS } from "../../brain/k8s/service-fields.ts";
import { checkedOf, decoderOf, mapEntry } from "./compile.ts";
import type { Reader } from "./wire.ts";

/** what the sources read of an item (Checked.metadata), beside the object's own metadata */
interface Meta {
  meta: Obj;
  resourceVersion: string;
}

/** a map fast-check's stringMap would copy as it is (it leaves these keys out) */
const plainMap = (m: Record<string, string>) => !Object.hasOwn(m, "prototype") && !Object.hasOwn(m, "constructor");

/** ObjectMeta as fast-check's metadata() makes it: name 1 (required), namespace 3, resourceVersion 6, labels 11, annotations 12 */
function meta(r: Reader, end: number): Meta | null {
  let name = "";
  let namespace = "";
  let resourceVersion = "";
  let labels: Record<string, string> | undefined;
  let annotations: Record<string, string> | undefined;
  while (r.pos < end) {
    let t = r.buf[r.pos]; // a key is one byte for every field kpng reads: no call for it
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    switch (t) {
      case 10:
        name = r.string(end) || name;
        break;
      case 26:
        namespace = r.atom(end) || namespace;
        break;
      case 50:
        resourceVersion = r.string(end);
        break;
      case 90:
        mapEntry((labels ??= {}), r, r.sub(end));
        break;
      case 98:
        mapEntry((annotations ??= {}), r, r.sub(end));
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  if (!name || (labels && !plainMap(labels)) || (annotations && !plainMap(annotations))) return null;
  const out: Obj = { name };
  if (namespace) out.namespace = namespace;
  if (labels) out.labels = labels;
  if (annotations) out.annotations = annotations;
  return { meta: out, resourceVersion };
}

/** `name` and `namespace` as the sources read them, and the resourceVersion a watch resumes from */
const itemMeta = (object: K8sService | K8sEndpointSlice, m: Meta) =>
  new Checked(object, { name: object.metadata.name, namespace: object.metadata.namespace, resourceVersion: m.resourceVersion });

// -- EndpointSlice

const POD = [0x50, 0x6f, 0x64]; // "Pod"

/** ForZone / ForNode lists: each `{ name }` (name 1, always written) */
function hint(r: Reader, end: number): Obj | null {
  let name: string | undefined;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 10) name = r.atom(end);
    else r.skip(t, end);
  }
  r.done(end);
  return name === undefined ? null : { name };
}

/** EndpointHints: forZones 1, forNodes 2 */
function hints(r: Reader, end: number): Obj | null {
  let forZones: Obj[] | undefined;
  let forNodes: Obj[] | undefined;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 10 || t === 18) {
      const h = hint(r, r.sub(end));
      if (!h) return null;
      if (t === 10) (forZones ??= []).push(h);
      else (forNodes ??= []).push(h);
    } else r.skip(t, end);
  }
  r.done(end);
  const out: Obj = {};
  if (forZones) out.forZones = forZones;
  if (forNodes) out.forNodes = forNodes;
  return out;
}

/** targetRef: a Pod's name, "" for any other reference (kind 1, name 3): the name is made a string only for a Pod */
function podName(r: Reader, end: number): string {
  let pod = false;
  let from = 0;
  let to = 0;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 10) {
      const kend = r.sub(end);
      const buf = r.buf;
      if (kend > r.pos) pod = kend - r.pos === 3 && buf[r.pos] === POD[0] && buf[r.pos + 1] === POD[1] && buf[r.pos + 2] === POD[2];
      r.pos = kend;
    } else if (t === 26) {
      const nend = r.sub(end);
      if (nend > r.pos) {
        from = r.pos;
        to = nend;
      }
      r.pos = nend;
    } else r.skip(t, end);
  }
  r.done(end);
  return pod && to > from ? r.slice(from, to) : "";
}

/** EndpointConditions (ready 1, serving 2, terminating 3) as sharedConditions' codes, packed r*25 + s*5 + t */
function conditionCodes(r: Reader, end: number): number {
  // what Go writes for every endpoint with its three conditions set: ready, serving, terminating, one byte each
  const buf = r.buf;
  const p = r.pos;
  if (end - p === 6 && buf[p] === 8 && buf[p + 2] === 16 && buf[p + 4] === 24 && (buf[p + 1] | buf[p + 3] | buf[p + 5]) < 2) {
    r.pos = end;
    return (
      (buf[p + 1] ? CONDITION_TRUE : CONDITION_FALSE) * 25 +
      (buf[p + 3] ? CONDITION_TRUE : CONDITION_FALSE) * 5 +
      (buf[p + 5] ? CONDITION_TRUE : CONDITION_FALSE)
    );
  }
  let ready = 0;
  let serving = 0;
  let terminating = 0;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 8) ready = r.bool() ? CONDITION_TRUE : CONDITION_FALSE;
    else if (t === 16) serving = r.bool() ? CONDITION_TRUE : CONDITION_FALSE;
    else if (t === 24) terminating = r.bool() ? CONDITION_TRUE : CONDITION_FALSE;
    else r.skip(t, end);
  }
  r.done(end);
  return ready * 25 + serving * 5 + terminating;
}

const NO_CONDITIONS = -1;

/**
 * Endpoint: addresses 1, conditions 2, hostname 3, targetRef 4, nodeName 6,
 * zone 7, hints 8; as fast-slice's endpoint() makes it (its one literal for
 * the common endpoint), or null.
 */
function endpoint(r: Reader, end: number): Obj | null {
  const addresses: string[] = [];
  let codes = NO_CONDITIONS;
  let hostname: string | undefined;
  let nodeName: string | undefined;
  let zone: string | undefined;
  let hinted: Obj | null | undefined;
  let ref = false;
  let pod = "";
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    switch (t) {
      case 10:
        addresses.push(r.string(end));
        break;
      case 18:
        codes = conditionCodes(r, r.sub(end));
        break;
      case 26:
        hostname = r.string(end);
        break;
      case 34:
        ref = true;
        pod = podName(r, r.sub(end));
        break;
      case 50:
        nodeName = r.atom(end);
        break;
      case 58:
        zone = r.atom(end);
        break;
      case 66:
        hinted = hints(r, r.sub(end));
        if (!hinted) return null;
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  if (!addresses.length) return null;
  const conditions = codes === NO_CONDITIONS ? undefined : sharedConditions(Math.floor(codes / 25), Math.floor(codes / 5) % 5, codes % 5);
  if (hostname === undefined && hinted === undefined && conditions && nodeName !== undefined && zone !== undefined && pod)
    return { addresses, conditions, nodeName, zone, pod };
  const out: Obj = { addresses };
  if (conditions) out.conditions = conditions;
  if (hostname !== undefined) out.hostname = hostname;
  if (nodeName !== undefined) out.nodeName = nodeName;
  if (zone !== undefined) out.zone = zone;
  if (hinted) out.hints = hinted;
  if (ref && pod) out.pod = pod;
  return out;
}

/** EndpointPort: name 1, protocol 2, port 3; as fast-slice's port() makes it, or null */
function endpointPort(r: Reader, end: number): Obj | null {
  let name: string | undefined;
  let protocol = "TCP";
  let port: number | undefined;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    if (t === 10) name = r.atom(end);
    else if (t === 18) protocol = r.atom(end);
    else if (t === 24) port = r.int32();
    else r.skip(t, end);
  }
  r.done(end);
  if (checkProtocol(protocol) === FAIL || (port !== undefined && (port < 1 || port > 65535))) return null;
  const out: Obj = {};
  if (name !== undefined) out.name = name;
  out.protocol = protocol;
  if (port !== undefined) out.port = port;
  return out;
}

/** EndpointSlice: metadata 1, endpoints 2, ports 3, addressType 4 */
export function checkedSlice(r: Reader, end: number): Checked | null {
  let m: Meta | null = null;
  let family = "";
  let endpoints: Obj[] | undefined;
  let ports: Obj[] | undefined;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    switch (t) {
      case 10:
        m = meta(r, r.sub(end));
        if (!m) return null;
        break;
      case 18: {
        const ep = endpoint(r, r.sub(end));
        if (!ep) return null;
        (endpoints ??= []).push(ep);
        break;
      }
      case 26: {
        const p = endpointPort(r, r.sub(end));
        if (!p) return null;
        (ports ??= []).push(p);
        break;
      }
      case 34:
        family = r.atom(end);
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  if (!m || (family !== "IPv4" && family !== "IPv6" && family !== "FQDN")) return null;
  // Go writes the address type after the endpoints: their first addresses are checked against it now
  if (endpoints && family !== "FQDN") {
    const v6 = family === "IPv6";
    for (let i = 0; i < endpoints.length; i++) if (!canonicalFirstAddress(endpoints[i].addresses as string[], v6)) return null;
  }
  const out: Obj = { kind: "EndpointSlice", metadata: m.meta, addressType: family };
  if (endpoints) out.endpoints = endpoints;
  if (ports) out.ports = ports;
  return itemMeta(finish(out as K8sEndpointSlice), m);
}

// -- Service

/** ServiceSpec as fast-service's check makes it, or null (service-fields.ts's table) */
const spec = checkedOf(SERVICE_SPEC);
/** ServiceStatus, decoded and checked: its check shares its empty outputs */
const statusDecoder = decoderOf(SERVICE_STATUS.wire as ProtoTable);
const checkStatus = SERVICE_STATUS.kind.check;

/** Service: metadata 1, spec 2, status 3 */
export function checkedService(r: Reader, end: number): Checked | null {
  let m: Meta | null = null;
  let sp: Obj | null = null;
  let st: unknown;
  while (r.pos < end) {
    let t = r.buf[r.pos];
    if (t < 0x80) r.pos++;
    else t = r.uint32();
    switch (t) {
      case 10:
        m = meta(r, r.sub(end));
        if (!m) return null;
        break;
      case 18:
        sp = spec(r, r.sub(end));
        if (!sp) return null;
        break;
      case 26:
        st = checkStatus(statusDecoder(r, r.sub(end)));
        if (st === FAIL) return null;
        break;
      default:
        r.skip(t, end);
    }
  }
  r.done(end);
  if (!m || !sp) return null;
  const out: Obj = { kind: "Service", metadata: m.meta, spec: sp };
  if (st !== undefined) out.status = st;
  return itemMeta(finish(out as K8sService), m);
}

/** The reader of each kind read straight into its checked object. */
export const checkedReaders: Record<string, (r: Reader, end: number) => Checked | null> = {
  Service: checkedService,
  EndpointSlice: checkedSlice,
};
