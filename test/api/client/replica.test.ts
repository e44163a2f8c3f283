// The client's rebuilt state: identity kept for what did not change, and a
// resync (after a reconnect) reduced to the real differences.

import { create, toBinary } from "@bufbuild/protobuf";
import { describe, expect, test } from "bun:test";
import { Replica } from "../../../src/core/api/client/replica.ts";
import type { ChangeSet, WireOp } from "../../../src/core/wire/ops.ts";
import { watchChangeSets } from "../../../src/core/api/client/streams.ts";
import type { GrpcConnection } from "../../../src/core/api/client/grpc.ts";
import { stateOps } from "../../../src/core/brain/ops.ts";
import type { NodeState } from "../../../src/core/brain/state.ts";
import { wireOps } from "../../../src/core/api/server/watch.ts";
import { encodeOpItem, WireCache } from "../../../src/core/api/server/wire.ts";
import { EndpointSchema, Set as SetKind } from "../../../src/gen/localv1/services_pb.ts";
import { brainWith, remove, serviceObjects, upsert } from "../brain-fixture.ts";
import type { GenOptions } from "../gen-cluster.ts";
import { v4 } from "../../fixtures/addresses.ts";

const gen: GenOptions = { services: 5, endpoints: 3 };
const cache = new WireCache();
const full = (s: NodeState): ChangeSet => ({ reset: true, ops: wireOps(new Map(), s.services, null, cache) });
const diff = (a: NodeState, b: NodeState): ChangeSet => ({ reset: false, ops: wireOps(a.services, b.services, null, cache) });
const opsOf = (prev: NodeState, next: NodeState, change: ReadonlySet<string> | null) =>
  stateOps(prev.services, next.services, change).map((o) => `${o.op} ${o.key}${"endpointKey" in o ? `/${o.endpointKey}` : ""}`);

describe("Replica", () => {
  test("the first change set is a full state with change null", () => {
    const brain = brainWith(gen);
    const r = new Replica("node-1");
    const rev = r.applyChangeSet(full(brain.view("node-1").state!))!;
    expect(rev.change).toBeNull();
    expect(rev.state.services.size).toBe(5);
    expect([...rev.state.services.values()].every((se) => se.endpoints.size === 3)).toBe(true);
  });

  test("a change set touching one endpoint: only that service changes, every other object is kept", () => {
    const brain = brainWith(gen);
    const r = new Replica("node-1");
    const s1 = brain.view("node-1").state!;
    const first = r.applyChangeSet(full(s1))!.state;
    const [, slice] = serviceObjects(gen, 2);
    slice.endpoints[1].conditions.ready = false;
    upsert(brain, slice);
    const rev = r.applyChangeSet(diff(s1, brain.view("node-1").state!))!;
    expect([...rev.change!]).toEqual(["ns-2/svc-2"]);
    for (const [k, se] of rev.state.services) {
      if (k === "ns-2/svc-2") {
        expect(se.service).toBe(first.services.get(k)!.service);
        expect([...se.endpoints.keys()]).toEqual(["svc-2-0", "svc-2-2"]);
        expect(se.endpoints.get("svc-2-0")).toBe(first.services.get(k)!.endpoints.get("svc-2-0")!);
      } else expect(se).toBe(first.services.get(k)!);
    }
  });

  const resyncs: Array<{ name: string; edit: (b: ReturnType<typeof brainWith>) => void; want: string[] }> = [
    { name: "same state (a brain restart with nothing new): no revision at all", edit: () => {}, want: [] },
    {
      name: "a service gone meanwhile: its endpoint deletes and service delete are synthesised",
      edit: (b) => remove(b, "Service", "ns-4", "svc-4"),
      want: [
        "deleteEndpoint ns-4/svc-4/svc-4-0",
        "deleteEndpoint ns-4/svc-4/svc-4-1",
        "deleteEndpoint ns-4/svc-4/svc-4-2",
        "deleteService ns-4/svc-4",
      ],
    },
    {
      name: "one endpoint changed meanwhile: only that endpoint, nothing resent",
      edit: (b) => {
        const [, slice] = serviceObjects(gen, 0);
        slice.endpoints[0].addresses = [v4.pod(1, 99)];
        upsert(b, slice);
      },
      want: ["setEndpoint ns-0/svc-0/svc-0-0"],
    },
  ];
  for (const c of resyncs) {
    test(`resync after a reconnect, ${c.name}`, () => {
      const before = brainWith(gen);
      const r = new Replica("node-1");
      const held = r.applyChangeSet(full(before.view("node-1").state!))!.state;
      const after = brainWith(gen); // a restarted brain: new objects, maybe new content
      c.edit(after);
      const rev = r.applyChangeSet(full(after.view("node-1").state!));
      if (!c.want.length) return expect(rev).toBeNull();
      expect(opsOf(held, rev!.state, rev!.change)).toEqual(c.want);
      expect(opsOf(held, rev!.state, null)).toEqual(c.want);
    });
  }

  test("keeps no view into the received bytes (each would keep its whole chunk alive), yet knows a resent unchanged state", async () => {
    const brain = brainWith(gen);
    const r = new Replica("node-1");
    // The ops' bytes as a stream delivers them: views into received chunks (here one chunk per op).
    const chunks: Array<WeakRef<ArrayBufferLike>> = [];
    const received = (cs: ChangeSet): ChangeSet => ({
      reset: cs.reset,
      ops: cs.ops.map((o) => {
        if (o.op !== "set") return o;
        const chunk = new Uint8Array(o.bytes.length + 64);
        chunk.set(o.bytes, 64);
        chunks.push(new WeakRef(chunk.buffer));
        return { ...o, bytes: chunk.subarray(64) };
      }),
    });
    r.applyChangeSet(received(full(brain.view("node-1").state!)));
    // A turn of the event loop, then a full collection. The collector also scans
    // the stack conservatively, which may keep a straggler: most must be gone.
    await Bun.sleep(0);
    Bun.gc(true);
    expect(chunks.length).toBe(20); // 5 services and their 15 endpoints
    expect(chunks.filter((c) => c.deref()).length).toBeLessThan(5);
    expect(r.applyChangeSet(received(full(brain.view("node-1").state!)))).toBeNull();
  });

  test("a full state from Next: unchanged services and endpoints keep their objects, missing ones are deleted", () => {
    const brain = brainWith(gen);
    const r = new Replica("node-1");
    const s = brain.view("node-1").state!;
    const entries = (st: NodeState) =>
      [...st.services].map(
        ([k, se]) =>
          [k, { service: se.service, endpoints: [...se.endpoints] }] as [
            string,
            {
              service: typeof se.service;
              endpoints: Array<[string, typeof se.endpoints extends ReadonlyMap<string, infer E> ? E : never]>;
            },
          ],
      );
    const held = r.applySnapshot(entries(s))!.state;
    const restarted = brainWith(gen);
    remove(restarted, "Service", "ns-1", "svc-1");
    const rev = r.applySnapshot(entries(restarted.view("node-1").state!))!;
    expect([...rev.change!]).toEqual(["ns-1/svc-1"]);
    expect(rev.state.services.get("ns-0/svc-0")).toBe(held.services.get("ns-0/svc-0")!);
    expect(r.applySnapshot(entries(restarted.view("node-1").state!))).toBeNull();
  });

  test("endpoints for a service never sent are not exposed", () => {
    const r = new Replica("n");
    const bytes = toBinary(EndpointSchema, create(EndpointSchema, { IPs: { V4: [v4.pod(1, 1)] } }));
    const rev = r.applyChangeSet({ reset: true, ops: [{ op: "set", set: SetKind.EndpointsSet, path: "ns/ghost/e1", bytes }] });
    expect(rev!.state.services.size).toBe(0);
  });
});

/** A connection that answers every call with prepared OpItems. */
function fakeConn(ops: WireOp[]): GrpcConnection {
  return {
    async *call() {
      yield ops.map(encodeOpItem);
    },
    close() {},
  };
}

describe("watchChangeSets", () => {
  test("Reset counts only as a stream's first op (kpng's client ignores it later)", async () => {
    const set: WireOp = { op: "set", set: SetKind.ServicesSet, path: "a/b", bytes: new Uint8Array() };
    const got: ChangeSet[] = [];
    for await (const cs of watchChangeSets(
      fakeConn([{ op: "reset" }, set, { op: "sync" }, { op: "reset" }, set, { op: "sync" }]),
      "n",
      new AbortController().signal,
    ))
      got.push(cs);
    expect(got.map((c) => c.reset)).toEqual([true, false]);
    expect(got.map((c) => c.ops.length)).toEqual([1, 1]);
  });
});
