// The protobuf decoders made from the field tables
// (src/core/sources/protobuf/compile.ts): a field added to a table is read
// by both, the JSON-shape decoder keeping or leaving out a zero value as
// Go's JSON does for its presence, the checked decoder taking exactly what
// the hand-written check of the decoded JSON takes, keys in the table's
// order. Bytes are written by the test encoder (test/harness), not kpng.

import { describe, expect, test } from "bun:test";
import { FAIL } from "../../src/core/brain/k8s/fast-check.ts";
import { anyString, enumOf, objectCheck, optional, proto, type Presence } from "../../src/core/brain/k8s/fields.ts";
import { SERVICE_SPEC } from "../../src/core/brain/k8s/service-fields.ts";
import { checkedOf, decoderOf, decoderSource } from "../../src/core/sources/protobuf/compile.ts";
import { ProtoError, Reader } from "../../src/core/sources/protobuf/wire.ts";
import { Writer } from "../harness/protobuf-encode.ts";

/** the Service spec with spec.trafficDistribution (ServiceSpec field 23, *string), added as one line */
const withTrafficDistribution = {
  ...SERVICE_SPEC,
  trafficDistribution: optional(
    { proto: 23, wire: "atom", presence: "pointer" },
    enumOf(["PreferClose", "PreferSameZone", "PreferSameNode"]),
  ),
};

const bytes = (fill: (w: Writer) => void) => {
  const w = new Writer();
  fill(w);
  return Buffer.from(w.bytes);
};
const read = <T>(decode: (r: Reader, end: number) => T, buf: Buffer) => decode(new Reader(buf, 0), buf.length);

/** a ServiceSpec as the API server writes it (fields in number order, strings always), then `extra` */
const specBytes = (extra: (w: Writer) => void = () => {}) =>
  bytes((w) => {
    w.str(3, "198.18.0.10");
    w.str(4, "ClusterIP");
    w.str(7, "None");
    w.str(11, "");
    w.int(12, 0);
    extra(w);
  });

describe("decoders made of a table", () => {
  const decode = decoderOf(withTrafficDistribution);
  const checked = checkedOf(withTrafficDistribution);
  const check = objectCheck(withTrafficDistribution);

  test("a field added to the table is read by both decoders, in the table's order by the checked one", () => {
    const buf = specBytes((w) => w.str(23, "PreferClose"));
    const json = read(decode, buf);
    expect(json).toEqual({ clusterIP: "198.18.0.10", type: "ClusterIP", sessionAffinity: "None", trafficDistribution: "PreferClose" });
    const out = read(checked, buf);
    expect(out).toEqual(check(json) as never);
    expect(JSON.stringify(out)).toBe(JSON.stringify(check(json)));
    expect(Object.keys(out!)).toEqual(["type", "clusterIP", "sessionAffinity", "trafficDistribution"]);
  });

  test("a value the check refuses: the JSON decoder keeps it, the checked decoder declines", () => {
    const buf = specBytes((w) => w.str(23, "PreferSomewhere"));
    expect(read(decode, buf)).toMatchObject({ trafficDistribution: "PreferSomewhere" });
    expect(check(read(decode, buf))).toBe(FAIL);
    expect(read(checked, buf)).toBeNull();
  });

  test("the tables without the field skip it, unread", () => {
    const buf = specBytes((w) => w.str(23, "PreferClose"));
    expect(read(decoderOf(SERVICE_SPEC), buf)).not.toHaveProperty("trafficDistribution");
    expect(read(checkedOf(SERVICE_SPEC), buf)).not.toHaveProperty("trafficDistribution");
  });

  test("bad bytes in the new field are refused by both (ProtoError)", () => {
    const buf = Buffer.concat([specBytes(), Buffer.from([0xba, 0x01, 0x20, 0x41])]); // field 23, 32 bytes said, 1 there
    expect(() => read(decode, buf)).toThrow(ProtoError);
    expect(() => read(checked, buf)).toThrow(ProtoError);
  });
});

describe("presence: when the JSON of a zero value has the field", () => {
  const cases: Array<{ presence: Presence; wire: "string" | "int32"; zero: string | number; json: Record<string, unknown> }> = [
    { presence: "omitempty", wire: "string", zero: "", json: {} },
    { presence: "pointer", wire: "string", zero: "", json: { f: "" } },
    { presence: "always", wire: "string", zero: "", json: { f: "" } },
    { presence: "omitempty", wire: "int32", zero: 0, json: {} },
    { presence: "pointer", wire: "int32", zero: 0, json: { f: 0 } },
  ];
  for (const c of cases)
    test(`${c.wire} ${c.presence}: ${JSON.stringify(c.json)}`, () => {
      const buf = bytes((w) => (typeof c.zero === "string" ? w.str(1, c.zero) : w.int(1, c.zero)));
      expect(read(decoderOf({ f: proto(1, c.wire, c.presence) }), buf)).toEqual(c.json);
    });

  test("a repeated field without omitempty is null when absent (Go's JSON of a nil list)", () => {
    expect(read(decoderOf({ f: proto(1, "string", "always", true) }), Buffer.alloc(0))).toEqual({ f: null });
    expect(read(decoderOf({ f: proto(1, "string", "omitempty", true) }), Buffer.alloc(0))).toEqual({});
  });

  test("a last non-zero value of an omitempty field wins; a zero one after it is left out", () => {
    const buf = bytes((w) => (w.str(1, "a"), w.str(1, "")));
    expect(read(decoderOf({ f: proto(1, "string") }), buf)).toEqual({ f: "a" });
    expect(read(checkedOf({ f: optional({ proto: 1, wire: "string", presence: "omitempty" }, anyString) }), buf)).toEqual({ f: "a" });
  });

  test("the source is one switch over the table's keys (field n, wire type w: n * 8 + w)", () => {
    const src = decoderSource({ a: proto(1, "string"), b: proto(23, "int32") });
    expect(src).toContain("case 10:");
    expect(src).toContain("case 184:");
  });
});
