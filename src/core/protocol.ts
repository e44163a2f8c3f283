// localv1's Protocol enum (proto/localv1/services.proto) for the code every
// node runs at start-up: the brain's model and the backends' toolkit. The
// generated services_pb.ts holds the same enum, but importing any value of it
// evaluates that file's descriptor registry (protobuf-es' fileDesc and its
// runtime), which a node proxy never uses otherwise (docs/results/2026-11.md).
// test/brain/protocol.test.ts checks that the two agree.

import type { Protocol as Generated } from "../gen/localv1/services_pb.ts";

/** the generated enum's values and its reverse mapping (`Protocol[1] === "TCP"`), as TypeScript builds an enum */
export const Protocol = {
  UnknownProtocol: 0,
  TCP: 1,
  UDP: 2,
  SCTP: 3,
  0: "UnknownProtocol",
  1: "TCP",
  2: "UDP",
  3: "SCTP",
} as unknown as typeof Generated;

export type Protocol = Generated;
