// A global stream that did not ask for a while: its next change set takes it
// from the snapshot it was sent to the latest in one step, whether the
// snapshots it skipped are still in the model's change log or not.

import { describe, expect, test } from "bun:test";
import { GlobalStream, globalOps } from "../../src/core/api/server/global-watch.ts";
import { GlobalModel } from "../../src/core/global/model.ts";
import { brainWith, serviceObjects, upsert } from "../api/brain-fixture.ts";

const gen = { services: 30, endpoints: 3, nodes: 3 };
const sorted = (ops: ReturnType<typeof globalOps>) =>
  ops.map((o) => JSON.stringify(o, (_k, v) => (v instanceof Uint8Array ? Buffer.from(v).toString("hex") : v))).sort();

describe("a stream that skipped snapshots", () => {
  for (const skipped of [1, 3, 100]) {
    test(`${skipped} changes later: one change set, the ops of a full comparison`, async () => {
      const brain = brainWith(gen);
      const model = new GlobalModel(brain);
      const ac = new AbortController();
      const stream = new GlobalStream(model, ac.signal);
      try {
        await stream.next(); // the whole model
        const start = model.snapshot!;
        for (let i = 0; i < skipped; i++) {
          const [, slice] = serviceObjects(gen, i % gen.services);
          slice.endpoints[0].conditions.ready = Math.floor(i / gen.services) % 2 === 1;
          upsert(brain, slice);
        }
        const ops = await stream.next();
        expect(ops.at(-1)).toEqual({ op: "sync" });
        const expected = globalOps(start, model.snapshot!, null);
        expect(expected.length).toBeGreaterThan(0);
        expect(sorted(ops.slice(0, -1))).toEqual(sorted(expected));
      } finally {
        stream.close();
        model.close();
        ac.abort();
      }
    });
  }
});
