// Sets.Watch and Endpoints.Next semantics, through both server paths.

import { clone, fromBinary } from "@bufbuild/protobuf";
import { Code } from "@connectrpc/connect";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import type { Brain } from "../../../src/core/brain/brain.ts";
import { EndpointSchema, ServiceSchema, Set as SetKind } from "../../../src/gen/localv1/services_pb.ts";
import { brainWith, remove, serviceObjects, upsert } from "../brain-fixture.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { startApiServer } from "../../../src/core/api/server/index.ts";
import { codeOf, connectDriver, grpcDriver, setPaths, type Driver } from "./drivers.ts";
import { tempDir } from "../../harness/kpng-process.ts";
import type { GenOptions } from "../gen-cluster.ts";

const gen: GenOptions = { services: 4, endpoints: 3, nodes: 3 };
const S = SetKind.ServicesSet;
const E = SetKind.EndpointsSet;

const drivers: Array<{ name: string; make: (b: Brain) => Driver | Promise<Driver> }> = [
  { name: "connect (in memory)", make: (b) => connectDriver(b) },
  { name: "grpc (unix socket)", make: (b) => grpcDriver(b) },
];

for (const { name, make } of drivers) {
  let brain: Brain;
  let api: Driver;
  /** a brain of the block's own on the generated cluster, and its API through this driver (blocks run one after the other) */
  const fresh = () => {
    beforeAll(async () => {
      brain = brainWith(gen);
      api = await make(brain);
    });
    afterAll(() => api.close());
  };

  describe(`Watch, ${name}`, () => {
    fresh();

    test("first change set: Reset, every service set, then every endpoint set, then Sync", async () => {
      const w = api.watch("node-1");
      const cs = await w.next();
      w.close();
      expect(cs.reset).toBe(true);
      const state = brain.view("node-1").state!;
      const kinds = cs.ops.map((o) => (o.op === "set" ? o.set : -1));
      const lastService = kinds.lastIndexOf(S);
      const firstEndpoint = kinds.indexOf(E);
      expect(lastService).toBeLessThan(firstEndpoint);
      expect(setPaths(cs, S).sort()).toEqual([...state.services.keys()].sort());
      const eps = [...state.services].flatMap(([k, se]) => [...se.endpoints.keys()].map((ek) => `${k}/${ek}`));
      expect(setPaths(cs, E).sort()).toEqual(eps.sort());
      for (const op of cs.ops) {
        if (op.op !== "set") continue;
        const parts = op.path.split("/");
        if (op.set === S) {
          expect(parts).toHaveLength(2);
          expect(fromBinary(ServiceSchema, op.bytes)).toEqual(state.services.get(op.path)!.service);
        } else {
          expect(parts).toHaveLength(3);
          // as messages: the brain's endpoints keep $typeName on their prototype (brain/model/endpoints.ts)
          expect(fromBinary(EndpointSchema, op.bytes)).toEqual(
            clone(EndpointSchema, state.services.get(`${parts[0]}/${parts[1]}`)!.endpoints.get(parts[2])!),
          );
        }
      }
    });

    test("an endpoint turning unready: one change set with only that endpoint's delete", async () => {
      const w = api.watch("node-1");
      await w.next();
      const [, slice] = serviceObjects(gen, 1);
      slice.endpoints[2].conditions.ready = false;
      upsert(brain, slice);
      const cs = await w.next();
      expect(cs.reset).toBe(false);
      expect(cs.ops).toEqual([{ op: "delete", set: E, path: "ns-1/svc-1/svc-1-2" }]);
      slice.endpoints[2].conditions.ready = true;
      upsert(brain, slice);
      const back = await w.next();
      expect(setPaths(back, E)).toEqual(["ns-1/svc-1/svc-1-2"]);
      expect(back.ops).toHaveLength(1);
      w.close();
    });

    test("a service removed: its endpoint deletes come before the service delete, in one change set", async () => {
      const w = api.watch("node-1");
      await w.next();
      const [svc, slice] = serviceObjects(gen, 3);
      remove(brain, "Service", "ns-3", "svc-3");
      const cs = await w.next();
      expect(cs.ops.map((o) => `${o.op} ${o.op === "sync" || o.op === "reset" ? "" : o.path}`)).toEqual([
        "delete ns-3/svc-3/svc-3-0",
        "delete ns-3/svc-3/svc-3-1",
        "delete ns-3/svc-3/svc-3-2",
        "delete ns-3/svc-3",
      ]);
      upsert(brain, svc, slice);
      const again = await w.next();
      expect(setPaths(again, S)).toEqual(["ns-3/svc-3"]);
      expect(setPaths(again, E)).toHaveLength(3);
      w.close();
    });

    test("revisions before the client asks: one change set with their union; a change undone meanwhile is not sent", async () => {
      const w = api.watch("node-1");
      await w.next();
      const [, s0] = serviceObjects(gen, 0);
      const [, s2] = serviceObjects(gen, 2);
      s0.endpoints[0].conditions.ready = false;
      upsert(brain, s0); // rev +1
      s0.endpoints[0].conditions.ready = true;
      upsert(brain, s0); // rev +1, undoes it
      s2.endpoints[1].conditions.ready = false;
      upsert(brain, s2); // rev +1
      const cs = await w.next();
      expect(cs.ops).toEqual([{ op: "delete", set: E, path: "ns-2/svc-2/svc-2-1" }]);
      s2.endpoints[1].conditions.ready = true;
      upsert(brain, s2);
      await w.next();
      w.close();
    });

    test("never an empty change set: a revision that nets to nothing for this stream sends nothing", async () => {
      const w = api.watch("node-1");
      await w.next();
      const [, s0] = serviceObjects(gen, 0);
      s0.endpoints[0].conditions.ready = false;
      upsert(brain, s0);
      s0.endpoints[0].conditions.ready = true;
      upsert(brain, s0);
      const pending = w.next();
      const early = await Promise.race([pending.then(() => "change set"), Bun.sleep(150).then(() => "nothing")]);
      expect(early).toBe("nothing");
      const [svc] = serviceObjects(gen, 0);
      svc.metadata.labels = { touched: "yes" };
      upsert(brain, svc);
      const cs = await pending;
      expect(cs.ops.map((o) => o.op)).toEqual(["set"]);
      expect(setPaths(cs, S)).toEqual(["ns-0/svc-0"]);
      w.close();
    });

    test("one brain, several node names: each stream gets its own node's endpoints", async () => {
      const states = await Promise.all(
        ["node-1", "node-2", "node-3"].map(async (n) => {
          const w = api.watch(n);
          const cs = await w.next();
          w.close();
          return cs;
        }),
      );
      states.forEach((cs, i) => {
        const local = cs.ops.filter((o) => o.op === "set" && o.set === E && fromBinary(EndpointSchema, o.bytes).Local);
        // endpoint j of every service runs on node (j % 3) + 1
        expect(local.map((o) => (o as { path: string }).path.split("-").pop()).every((j) => Number(j) % 3 === i)).toBe(true);
        expect(local.length).toBeGreaterThan(0);
      });
    });

    test("unknown node name: NotFound, and the brain keeps serving", async () => {
      const w = api.watch("no-such-node");
      const err = await w.next().catch((e: unknown) => e);
      w.close();
      expect(codeOf(err)).toBe(Code.NotFound);
      expect(String(err)).toContain('node "no-such-node" is not a Node in the cluster');
      const ok = api.watch("node-2");
      expect((await ok.next()).reset).toBe(true);
      ok.close();
    });

    // Connect's in-memory router transport does not pass a client's cancel on to the
    // handler; the Connect protocol over real HTTP/2 is checked at the end of this file.
    test.skipIf(name === "connect (in memory)")("a watcher that goes away is unsubscribed from its node's view", async () => {
      const listeners = () => (brain.view("node-3") as unknown as { listeners: Set<unknown> }).listeners.size;
      const base = listeners();
      const w = api.watch("node-3");
      await w.next();
      expect(listeners()).toBe(base + 1);
      w.close();
      for (const end = Date.now() + 30_000; listeners() > base && Date.now() < end; ) await Bun.sleep(10); // a loaded machine may take seconds
      expect(listeners()).toBe(base);
    });

    test("empty NodeName: InvalidArgument", async () => {
      const w = api.watch("");
      expect(codeOf(await w.next().catch((e: unknown) => e))).toBe(Code.InvalidArgument);
      w.close();
    });
  });

  describe(`Next, ${name}`, () => {
    fresh();

    test("a stale InstanceID gets the current state at once, with the next call's (InstanceID, Rev) first", async () => {
      const snap = await api.next({ instanceID: 12345n, rev: 99n, nodeName: "node-2" });
      const state = brain.view("node-2").state!;
      expect(snap.instanceID).toBe(api.instanceID);
      expect(snap.rev).toBe(BigInt(state.rev));
      expect(snap.entries.map(([k]) => k).sort()).toEqual([...state.services.keys()].sort());
      const [key, e] = snap.entries[0];
      expect([...e.endpoints].map(([k]) => k)).toEqual([...state.services.get(key)!.endpoints.keys()]);
    });

    test("an older Rev gets the current state at once", async () => {
      const snap = await api.next({ instanceID: api.instanceID, rev: 0n, nodeName: "node-2" });
      expect(snap.rev).toBe(BigInt(brain.view("node-2").state!.rev));
    });

    test("the current (InstanceID, Rev) waits for the next revision", async () => {
      const rev = BigInt(brain.view("node-2").state!.rev);
      const call = api.next({ instanceID: api.instanceID, rev, nodeName: "node-2" });
      const early = await Promise.race([call.then(() => "answered"), Bun.sleep(150).then(() => "waiting")]);
      expect(early).toBe("waiting");
      const [, slice] = serviceObjects(gen, 1);
      slice.endpoints[0].conditions.ready = false;
      upsert(brain, slice);
      const snap = await call;
      expect(snap.rev).toBe(rev + 1n);
      const svc1 = snap.entries.find(([k]) => k === "ns-1/svc-1")![1];
      expect([...svc1.endpoints].map(([k]) => k)).not.toContain("svc-1-0");
    });

    test("an empty NodeName gets the brain's own node", async () => {
      const snap = await api.next({ instanceID: 0n, rev: 0n, nodeName: "" });
      expect(snap.rev).toBe(BigInt(brain.view("node-1").state!.rev));
    });

    test("unknown node name: NotFound", async () => {
      expect(codeOf(await api.next({ instanceID: 0n, rev: 0n, nodeName: "nope" }).catch((e: unknown) => e))).toBe(Code.NotFound);
    });
  });
}

test("Watch, connect: a NodeName changed mid-stream is InvalidArgument", async () => {
  const api = connectDriver(brainWith(gen));
  const w = api.watch("node-1");
  await w.next();
  expect(codeOf(await w.next("node-2").catch((e: unknown) => e))).toBe(Code.InvalidArgument);
  w.close();
});

test("Connect protocol over HTTP/2: a cancelled Watch is unsubscribed from its node's view", async () => {
  const { connect } = await import("node:http2");
  const net = await import("node:net");
  const brain = brainWith(gen);
  const dir = tempDir();
  dir.create();
  const sock = `${dir.path}/api.sock`;
  const server = await startApiServer({ brain, listen: [`unix://${sock}`], defaultNodeName: "node-1", log: memoryLogger() });
  const listeners = () => (brain.view("node-2") as unknown as { listeners: Set<unknown> }).listeners.size;
  const session = connect("http://localhost", { createConnection: () => net.connect(sock) });
  try {
    const msg = Buffer.from('{"NodeName":"node-2"}');
    const req = session.request({ ":method": "POST", ":path": "/localv1.Sets/Watch", "content-type": "application/connect+json" });
    req.write(Buffer.concat([Buffer.from([0, 0, 0, 0, msg.length]), msg]));
    await new Promise((r) => req.once("data", r));
    expect(listeners()).toBe(1);
    req.close();
    for (const end = Date.now() + 30_000; listeners() > 0 && Date.now() < end; ) await Bun.sleep(10); // a loaded machine may take seconds
    expect(listeners()).toBe(0);
  } finally {
    session.destroy();
    await server.close();
    dir.remove();
  }
});
