// localv1.Endpoint -> bytes, by hand: the mirror of client/decode-endpoint.ts.
//
// Why: the first stream after a state is computed marshals every endpoint
// (100,000 for 10,000 services), and protobuf-es' reflective toBinary took
// a large part of that time (see docs/results/2026-11.md). The output is
// byte-for-byte protobuf-es' (a test
// compares them); a message this encoder does not fully know (unknown fields
// kept from a decode, a negative int32) goes to toBinary.

import { toBinary } from "@bufbuild/protobuf";
import { EndpointSchema, type Endpoint } from "../../../gen/localv1/services_pb.ts";

/** The Endpoint fields this encoder writes; a test keeps it equal to the schema's. */
export const HAND_ENCODED_FIELDS = [1, 2, 3, 4, 5, 100, 101, 102];

const LEN = 2;
const varintSize = (v: number) => (v < 0x80 ? 1 : v < 0x4000 ? 2 : v < 0x200000 ? 3 : v < 0x10000000 ? 4 : 5);

/** UTF-8 length; IPs, port names and node names are ASCII, so count without Buffer.byteLength in that case. */
function utf8Len(s: string): number {
  for (let i = 0; i < s.length; i++) if (s.charCodeAt(i) > 0x7f) return Buffer.byteLength(s);
  return s.length;
}
const strSize = (s: string) => {
  const n = utf8Len(s);
  return 1 + varintSize(n) + n;
};

// One scratch buffer, encoded into and copied out of: 100,000 small encodes
// without 100,000 closures and Buffer writes.
let scratch = new Uint8Array(4096);
let pos = 0;

function varint(v: number) {
  while (v >= 0x80) {
    scratch[pos++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  scratch[pos++] = v;
}
const tag = (field: number, wireType: number) => varint(field * 8 + wireType);
function str(field: number, s: string) {
  tag(field, LEN);
  const n = utf8Len(s);
  varint(n);
  if (n === s.length) for (let i = 0; i < n; i++) scratch[pos++] = s.charCodeAt(i);
  else pos += Buffer.from(scratch.buffer, scratch.byteOffset).write(s, pos, "utf8");
}

export function encodeEndpoint(ep: Endpoint): Uint8Array {
  if (ep.$unknown?.length || ep.IPs?.$unknown?.length || ep.Scopes?.$unknown?.length) return toBinary(EndpointSchema, ep);
  for (const p of ep.PortOverrides) if (p.Port < 0 || p.$unknown?.length) return toBinary(EndpointSchema, ep);

  // Pass 1: sizes (sub-messages first, their length prefixes depend on them).
  let ipsLen = 0;
  if (ep.IPs) {
    for (const ip of ep.IPs.V4) ipsLen += strSize(ip);
    for (const ip of ep.IPs.V6) ipsLen += strSize(ip);
  }
  const portLens = ep.PortOverrides.map((p) => (p.Name ? strSize(p.Name) : 0) + (p.Port ? 1 + varintSize(p.Port) : 0));
  const scopesLen = ep.Scopes ? (ep.Scopes.Internal ? 2 : 0) + (ep.Scopes.External ? 2 : 0) : 0;
  let size = 0;
  if (ep.Hostname) size += strSize(ep.Hostname);
  if (ep.IPs) size += 1 + varintSize(ipsLen) + ipsLen;
  if (ep.Local) size += 2;
  for (const n of portLens) size += 1 + varintSize(n) + n;
  if (ep.Scopes) size += 1 + varintSize(scopesLen) + scopesLen;
  // fields 100-102: two-byte tags
  if (ep.Terminating) size += 3;
  if (ep.NodeName) size += 1 + strSize(ep.NodeName);
  if (ep.Zone) size += 1 + strSize(ep.Zone);
  if (scratch.length < size) scratch = new Uint8Array(size * 2);

  // Pass 2: bytes, in field-number order as protobuf-es writes them.
  pos = 0;
  if (ep.Hostname) str(1, ep.Hostname);
  if (ep.IPs) {
    tag(2, LEN);
    varint(ipsLen);
    for (const ip of ep.IPs.V4) str(1, ip);
    for (const ip of ep.IPs.V6) str(2, ip);
  }
  if (ep.Local) tag(3, 0), varint(1);
  for (let i = 0; i < ep.PortOverrides.length; i++) {
    const p = ep.PortOverrides[i];
    tag(4, LEN);
    varint(portLens[i]);
    if (p.Name) str(1, p.Name);
    if (p.Port) tag(2, 0), varint(p.Port);
  }
  if (ep.Scopes) {
    tag(5, LEN);
    varint(scopesLen);
    if (ep.Scopes.Internal) tag(1, 0), varint(1);
    if (ep.Scopes.External) tag(2, 0), varint(1);
  }
  if (ep.Terminating) tag(100, 0), varint(1);
  if (ep.NodeName) str(101, ep.NodeName);
  if (ep.Zone) str(102, ep.Zone);
  return scratch.slice(0, pos);
}
