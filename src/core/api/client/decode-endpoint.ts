// Endpoint bytes -> a localv1.Endpoint message, by hand.
//
// Why: a full state carries ~10 endpoints per service, and protobuf-es'
// reflective fromBinary was the largest single cost of receiving one (see
// docs/results/2026-11.md). The result is the plain object fromBinary
// builds (same $typeName, fields and defaults; tests compare them), and
// anything this decoder does not know (a field added to the proto later, a
// negative or oversized number, a repeated message field to merge) falls
// back to fromBinary, so it is never wrong, only slower.

import { fromBinary } from "@bufbuild/protobuf";
import { EndpointSchema, type Endpoint, type EndpointScopes, type IPSet, type PortName } from "../../../gen/localv1/services_pb.ts";
import { Fields, LEN, VARINT } from "./wire-read.ts";

/** The Endpoint fields this decoder reads; a test keeps it equal to the schema's. */
export const HAND_DECODED_FIELDS = [1, 2, 3, 4, 5, 100, 101, 102];

class Unknown extends Error {}

export function decodeEndpoint(bytes: Uint8Array): Endpoint {
  const buf = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  try {
    return decode(buf);
  } catch (err) {
    if (err instanceof Unknown) return fromBinary(EndpointSchema, bytes);
    throw err;
  }
}

function decode(buf: Buffer): Endpoint {
  const ep = {
    $typeName: "localv1.Endpoint",
    Hostname: "",
    Local: false,
    PortOverrides: [] as PortName[],
    Terminating: false,
    NodeName: "",
    Zone: "",
  } as Endpoint;
  const r = new Fields(buf, 0, buf.length);
  while (r.next()) {
    const f = r.field;
    if (f === 1 || f === 101 || f === 102) {
      if (r.wireType !== LEN) unknown();
      const v = buf.toString("utf8", r.start, r.end);
      if (f === 1) ep.Hostname = v;
      else if (f === 101) ep.NodeName = v;
      else ep.Zone = v;
    } else if (f === 3 || f === 100) {
      if (r.wireType !== VARINT) unknown();
      if (f === 3) ep.Local = r.value !== 0;
      else ep.Terminating = r.value !== 0;
    } else if (f === 2 || f === 4 || f === 5) {
      // a message field seen twice must be merged: leave that to fromBinary
      if (r.wireType !== LEN || (f === 2 && ep.IPs) || (f === 5 && ep.Scopes)) unknown();
      if (f === 2) ep.IPs = ipSet(buf, r.start, r.end);
      else if (f === 4) ep.PortOverrides.push(portName(buf, r.start, r.end));
      else ep.Scopes = scopes(buf, r.start, r.end);
    } else unknown();
  }
  return ep;
}

function ipSet(buf: Buffer, start: number, end: number): IPSet {
  const s = { $typeName: "localv1.IPSet", V4: [] as string[], V6: [] as string[] } as IPSet;
  const r = new Fields(buf, start, end);
  while (r.next()) {
    if (r.wireType !== LEN || (r.field !== 1 && r.field !== 2)) unknown();
    (r.field === 1 ? s.V4 : s.V6).push(buf.toString("utf8", r.start, r.end));
  }
  return s;
}

function portName(buf: Buffer, start: number, end: number): PortName {
  const p = { $typeName: "localv1.PortName", Name: "", Port: 0 } as PortName;
  const r = new Fields(buf, start, end);
  while (r.next()) {
    if (r.field === 1 && r.wireType === LEN) p.Name = buf.toString("utf8", r.start, r.end);
    // int32: only non-negative values fit one varint below 2^31
    else if (r.field === 2 && r.wireType === VARINT && r.value < 2 ** 31) p.Port = r.value;
    else unknown();
  }
  return p;
}

function scopes(buf: Buffer, start: number, end: number): EndpointScopes {
  const s = { $typeName: "localv1.EndpointScopes", Internal: false, External: false } as EndpointScopes;
  const r = new Fields(buf, start, end);
  while (r.next()) {
    if (r.wireType !== VARINT || (r.field !== 1 && r.field !== 2)) unknown();
    if (r.field === 1) s.Internal = r.value !== 0;
    else s.External = r.value !== 0;
  }
  return s;
}

function unknown(): never {
  throw new Unknown();
}
