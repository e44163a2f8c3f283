// src/core/protocol.ts: the twin of the generated localv1 Protocol enum that
// the brain and the toolkit use, so that a node never evaluates the generated
// file's descriptor registry. Both must agree, names and numbers, both ways.

import { expect, test } from "bun:test";
import { Protocol } from "../../src/core/protocol.ts";
import { Protocol as Generated, ProtocolSchema } from "../../src/gen/localv1/services_pb.ts";

test("the Protocol twin holds the generated enum's names and numbers, and its reverse mapping", () => {
  expect({ ...Protocol }).toEqual({ ...Generated });
});

test("the Protocol twin holds every value of the proto enum", () => {
  for (const v of ProtocolSchema.values) {
    expect(Protocol[v.localName as keyof typeof Protocol]).toBe(v.number as never);
    expect(Protocol[v.number as Protocol]).toBe(v.localName as never);
  }
});
