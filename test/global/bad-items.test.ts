// A brain may send an item the agent cannot decode (a bug, another server's
// encoding): the agent skips it and says which, and the rest of the change
// set still reaches its brain (bad input at run time: skip and log, keep
// serving).

import { expect, test } from "bun:test";
import { encodeNodeInfo } from "../../src/core/global/encode.ts";
import { GlobalMirror } from "../../src/core/global/mirror.ts";
import { Set as SetKind } from "../../src/gen/localv1/services_pb.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node } from "../fixtures/k8s.ts";

test("items that do not decode are skipped, each named by its path; the rest of the change set applies", () => {
  const mirror = new GlobalMirror();
  const bad: string[] = [];
  const endpointPath = `default|web|web-ipv4|${v4.pod(1, 1)}`;
  const events = mirror.apply(
    {
      reset: true,
      ops: [
        { op: "set", set: SetKind.GlobalNodeInfos, path: "|node-1||", bytes: encodeNodeInfo(node("node-1", { ips: [v4.node(1)] })) },
        { op: "set", set: SetKind.GlobalServiceInfos, path: "default|web||", bytes: new Uint8Array() },
        { op: "set", set: SetKind.GlobalEndpointInfos, path: endpointPath, bytes: new Uint8Array() },
      ],
    },
    (e) => bad.push(e),
  );
  expect(bad).toEqual([
    "[invalid_argument] global service default|web||: Service.Name is empty",
    `[invalid_argument] global endpoint ${endpointPath}: Endpoint.IPs is empty`,
  ]);
  expect(events.map((e) => (e.type === "upsert" ? `upsert ${e.object.kind} ${e.object.metadata.name}` : e.type))).toEqual([
    "upsert Node node-1",
  ]);
});
