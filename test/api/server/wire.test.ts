// The hand-assembled wire bytes must be exactly protobuf-es' encoding, and
// the hand-parsed OpItems exactly what protobuf-es decodes.

import { clone, create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { describe, expect, test } from "bun:test";
import { decodeOpItem } from "../../../src/core/api/client/streams.ts";
import {
  encodeNextHead,
  encodeOpItem,
  encodeServiceEndpoints,
  frameMessages,
  frameOps,
  toOpItem,
  WireCache,
} from "../../../src/core/api/server/wire.ts";
import type { WireOp } from "../../../src/core/wire/ops.ts";
import { EndpointSchema, NextItemSchema, OpItemSchema, ServiceSchema, Set as SetKind } from "../../../src/gen/localv1/services_pb.ts";
import { v4 } from "../../fixtures/addresses.ts";

const svc = create(ServiceSchema, {
  Namespace: "shop",
  Name: "web",
  Type: "ClusterIP",
  IPs: { ClusterIPs: { V4: [v4.clusterIP(10)] } },
  Ports: [{ Name: "http", Protocol: 1, Port: 80 }],
});
const ep = create(EndpointSchema, {
  IPs: { V4: [v4.pod(1, 10)] },
  Local: true,
  PortOverrides: [{ Name: "http", Port: 8080 }],
  Scopes: { Internal: true, External: true },
});

const ops: Array<{ name: string; op: WireOp }> = [
  { name: "service set", op: { op: "set", set: SetKind.ServicesSet, path: "shop/web", bytes: toBinary(ServiceSchema, svc) } },
  { name: "endpoint set", op: { op: "set", set: SetKind.EndpointsSet, path: "shop/web/web-1", bytes: toBinary(EndpointSchema, ep) } },
  {
    name: "set with empty bytes (a message with only defaults)",
    op: { op: "set", set: SetKind.EndpointsSet, path: "a/b/c", bytes: new Uint8Array(0) },
  },
  { name: "set with a non-ASCII path", op: { op: "set", set: SetKind.ServicesSet, path: "ns/ünïcode", bytes: Uint8Array.of(1, 2, 3) } },
  { name: "endpoint delete", op: { op: "delete", set: SetKind.EndpointsSet, path: "shop/web/web-1" } },
  { name: "service delete", op: { op: "delete", set: SetKind.ServicesSet, path: "shop/web" } },
  { name: "sync", op: { op: "sync" } },
  { name: "reset", op: { op: "reset" } },
];

describe("OpItem bytes", () => {
  for (const { name, op } of ops) {
    test(`${name}: encoded like protobuf-es`, () => {
      expect(encodeOpItem(op)).toEqual(toBinary(OpItemSchema, toOpItem(op)));
    });
    test(`${name}: decoded like protobuf-es`, () => {
      const back = decodeOpItem(toBinary(OpItemSchema, toOpItem(op)));
      expect(toOpItem(back as WireOp)).toEqual(fromBinary(OpItemSchema, toBinary(OpItemSchema, toOpItem(op))));
    });
  }

  test("unknown fields (a newer server) are skipped when decoding", () => {
    const w = new BinaryWriter();
    w.tag(9, WireType.Varint).uint32(7);
    w.tag(2, WireType.LengthDelimited).fork();
    w.tag(1, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.Varint)
      .int32(1)
      .tag(3, WireType.Bit64)
      .fixed64(5n)
      .tag(2, WireType.LengthDelimited)
      .string("a/b")
      .join();
    w.tag(7, WireType.Bit32).fixed32(1);
    w.tag(2, WireType.LengthDelimited).bytes(Uint8Array.of(9));
    w.join();
    expect(decodeOpItem(w.finish())).toEqual({ op: "set", set: SetKind.ServicesSet, path: "a/b", bytes: Buffer.from([9]) });
  });

  test("a truncated item is an error, not a wrong op", () => {
    const bytes = encodeOpItem(ops[0].op);
    expect(() => decodeOpItem(bytes.subarray(0, bytes.length - 3))).toThrow(/truncated/);
  });
});

describe("NextItem bytes", () => {
  test("head: encoded like protobuf-es", () => {
    const want = create(NextItemSchema, { Next: { InstanceID: 0xfedcba9876543210n, Rev: 42n, NodeName: "node-1" } });
    expect(encodeNextHead(0xfedcba9876543210n, 42n, "node-1")).toEqual(toBinary(NextItemSchema, want));
  });
  test("service with endpoints and their keys: encoded like protobuf-es", () => {
    const ep2 = create(EndpointSchema, { IPs: { V4: [v4.pod(2, 10)] }, Scopes: { Internal: true } });
    const se = {
      service: svc,
      endpoints: new Map([
        ["web-1", ep],
        ["web-2", ep2],
      ]),
    };
    const want = create(NextItemSchema, { Endpoints: { Service: svc, Endpoints: [ep, ep2], EndpointKeys: ["web-1", "web-2"] } });
    expect(encodeServiceEndpoints(se, new WireCache())).toEqual(toBinary(NextItemSchema, want));
  });
});

test("gRPC framing: flag 0, 4-byte big-endian length, message", () => {
  expect([...frameMessages([Uint8Array.of(7), new Uint8Array(0), Uint8Array.of(1, 2)])]).toEqual([
    0, 0, 0, 0, 1, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2,
  ]);
});

test("a framed change set is the framed protobuf-es encoding of each op", () => {
  const long: WireOp = { op: "set", set: SetKind.EndpointsSet, path: "n/".repeat(100) + "x", bytes: new Uint8Array(20_000).fill(7) };
  const all = [...ops.map((o) => o.op), long];
  expect(frameOps(all)).toEqual(frameMessages(all.map((o) => toBinary(OpItemSchema, toOpItem(o)))));
});

test("the wire cache marshals one object once (identity = unchanged)", () => {
  const cache = new WireCache();
  expect(cache.service(svc)).toBe(cache.service(svc));
  expect(cache.endpoint(ep)).toBe(cache.endpoint(ep));
  expect(cache.service(clone(ServiceSchema, svc))).not.toBe(cache.service(svc));
});
