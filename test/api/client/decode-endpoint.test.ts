// The hand decoder must build exactly what protobuf-es' fromBinary builds,
// and the hand encoder write exactly what toBinary writes.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";
import { describe, expect, test } from "bun:test";
import { decodeEndpoint, HAND_DECODED_FIELDS } from "../../../src/core/api/client/decode-endpoint.ts";
import { encodeEndpoint, HAND_ENCODED_FIELDS } from "../../../src/core/api/server/encode-endpoint.ts";
import { EndpointSchema, type Endpoint } from "../../../src/gen/localv1/services_pb.ts";
import { v4, v6 } from "../../fixtures/addresses.ts";

const cases: Array<{ name: string; ep: Endpoint | Uint8Array }> = [
  {
    name: "every field set",
    ep: create(EndpointSchema, {
      Hostname: "web-1",
      IPs: { V4: [v4.pod(1, 10)], V6: [v6.pod(1, 10)] },
      Local: true,
      PortOverrides: [
        { Name: "http", Port: 8080 },
        { Name: "ü", Port: 65535 },
      ],
      Scopes: { Internal: true, External: true },
      Terminating: true,
      NodeName: "node-1",
      Zone: "zone-a",
    }),
  },
  { name: "all defaults (empty bytes)", ep: create(EndpointSchema) },
  { name: "empty sub-messages (present, all defaults)", ep: create(EndpointSchema, { IPs: {}, Scopes: {} }) },
  { name: "only external scope, v6 only", ep: create(EndpointSchema, { IPs: { V6: [v6.pod(2, 1)] }, Scopes: { External: true } }) },
  { name: "a negative port (10-byte varint): falls back", ep: create(EndpointSchema, { PortOverrides: [{ Name: "x", Port: -1 }] }) },
  {
    name: "an unknown field (a newer brain): falls back, keeping it",
    ep: new BinaryWriter().tag(3, WireType.Varint).bool(true).tag(200, WireType.LengthDelimited).string("new").finish(),
  },
  {
    name: "IPs sent twice (to be merged): falls back",
    ep: new BinaryWriter()
      .tag(2, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.LengthDelimited)
      .string(v4.pod(1, 1))
      .join()
      .tag(2, WireType.LengthDelimited)
      .fork()
      .tag(1, WireType.LengthDelimited)
      .string(v4.pod(1, 2))
      .join()
      .finish(),
  },
];

describe("decodeEndpoint", () => {
  for (const c of cases) {
    test(c.name, () => {
      const bytes = c.ep instanceof Uint8Array ? c.ep : toBinary(EndpointSchema, c.ep);
      expect(decodeEndpoint(bytes)).toStrictEqual(fromBinary(EndpointSchema, bytes));
    });
  }

  test("it knows every field of the schema (a new proto field must be taught to it)", () => {
    expect(EndpointSchema.fields.map((f) => f.number).sort((a, b) => a - b)).toEqual(HAND_DECODED_FIELDS);
  });

  test("a truncated message is an error", () => {
    const bytes = toBinary(EndpointSchema, cases[0].ep as Endpoint);
    expect(() => decodeEndpoint(bytes.subarray(0, bytes.length - 2))).toThrow();
  });
});

describe("encodeEndpoint", () => {
  for (const c of cases) {
    test(c.name, () => {
      // decoded by protobuf-es first, so unknown fields ride along as $unknown
      const ep = c.ep instanceof Uint8Array ? fromBinary(EndpointSchema, c.ep) : c.ep;
      expect(Buffer.from(encodeEndpoint(ep))).toEqual(Buffer.from(toBinary(EndpointSchema, ep)));
    });
  }

  test("it knows every field of the schema (a new proto field must be taught to it)", () => {
    expect(EndpointSchema.fields.map((f) => f.number).sort((a, b) => a - b)).toEqual(HAND_ENCODED_FIELDS);
  });
});
