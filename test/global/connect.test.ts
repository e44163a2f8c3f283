// /globalv1.Sets/Watch through Connect's handler (the path of the Connect
// protocol and of gRPC-Web/JSON clients), in memory: the same change sets as
// the fast gRPC path, with kpng's flow control (one per GlobalWatchReq).

import { create } from "@bufbuild/protobuf";
import { createClient, createRouterTransport } from "@connectrpc/connect";
import { expect, test } from "bun:test";
import { createApi } from "../../src/core/api/server/index.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { GlobalWatchReqSchema, Sets } from "../../src/gen/globalv1/global_pb.ts";
import type { OpItem } from "../../src/gen/localv1/services_pb.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { brainWith } from "../brain/helpers.ts";

const show = (o: OpItem) =>
  o.Op.case === "Set"
    ? `set ${o.Op.value.Ref!.Path}`
    : o.Op.case === "Delete"
      ? `delete ${o.Op.value.Path}`
      : (o.Op.case ?? "?").toLowerCase();

test("Connect path: Reset, the whole model, Sync; then one change set per request, only the change", async () => {
  const brain = brainWith([node("node-1"), svc(), slice({ endpoints: [{ ip: v4.pod(1, 1), node: "node-1", pod: "p1" }] })]);
  const api = createApi({ brain, defaultNodeName: "node-1", log: memoryLogger() });
  const ac = new AbortController();
  // One GlobalWatchReq per ask(), whenever Connect pulls the next one.
  let pending = 1;
  let wake: () => void = () => {};
  const ask = () => {
    pending++;
    wake();
  };
  async function* asks() {
    for (;;) {
      while (!pending) await new Promise<void>((r) => (wake = r));
      pending--;
      yield create(GlobalWatchReqSchema, {});
    }
  }
  const it = createClient(Sets, createRouterTransport(api.routes)).watch(asks(), { signal: ac.signal })[Symbol.asyncIterator]();
  const changeSet = async () => {
    const out: string[] = [];
    for (;;) {
      const r = await it.next();
      out.push(show(r.value as OpItem));
      if (out.at(-1) === "sync") return out;
    }
  };
  expect(await changeSet()).toEqual(["reset", "set |node-1||", "set default|web||", `set default|web|web-ipv4|${v4.pod(1, 1)}`, "sync"]);
  brain.apply([
    {
      type: "upsert",
      object: slice({
        endpoints: [
          { ip: v4.pod(1, 1), node: "node-1", pod: "p1" },
          { ip: v4.pod(1, 2), node: "node-1", pod: "p2" },
        ],
      }),
    },
  ]);
  brain.flush();
  ask();
  expect(await changeSet()).toEqual([`set default|web|web-ipv4|${v4.pod(1, 2)}`, "sync"]);
  brain.apply([{ type: "delete", kind: "Service", namespace: "default", name: "web" }]);
  brain.flush();
  ask();
  expect(await changeSet()).toEqual([
    `delete default|web|web-ipv4|${v4.pod(1, 1)}`,
    `delete default|web|web-ipv4|${v4.pod(1, 2)}`,
    "delete default|web||",
    "sync",
  ]);
  ac.abort();
  api.close();
});
