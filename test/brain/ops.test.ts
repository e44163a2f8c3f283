// The one ordered diff between snapshots (the API's Watch ops and the
// incremental backends' calls): service sets, endpoint deletes/sets, service
// deletes last.

import { describe, expect, test } from "bun:test";
import { stateOps } from "../../src/core/brain/ops.ts";
import { applyIncremental } from "../../src/host/feed.ts";
import type { IncrementalBackend } from "../../src/host/backend.ts";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc } from "../fixtures/k8s.ts";
import { brainWith } from "./helpers.ts";

const show = (ops: ReturnType<typeof stateOps>) => ops.map((o) => `${o.op} ${o.key}${"endpointKey" in o ? "/" + o.endpointKey : ""}`);

describe("stateOps", () => {
  test("from nothing: every service, then every endpoint", () => {
    const st = brainWith([svc(), slice({ endpoints: [{ ip: v4.pod(1, 1), pod: "a" }] })]).view("n").state!;
    expect(show(stateOps(new Map(), st.services))).toEqual(["setService default/web", "setEndpoint default/web/a"]);
  });

  test("deleting a service deletes its endpoints first, in the same change set", () => {
    const brain = brainWith([
      svc(),
      svc({ name: "api", clusterIPs: [v4.clusterIP(11)] }),
      slice({ endpoints: [{ ip: v4.pod(1, 1), pod: "a" }] }),
    ]);
    const before = brain.view("n").state!;
    brain.apply([
      { type: "delete", kind: "Service", namespace: "default", name: "web" },
      { type: "upsert", object: svc({ name: "api", clusterIPs: [v4.clusterIP(12)] }) },
    ]);
    brain.flush();
    const after = brain.view("n").state!;
    expect(show(stateOps(before.services, after.services))).toEqual([
      "setService default/api",
      "deleteEndpoint default/web/a",
      "deleteService default/web",
    ]);
  });

  test("an endpoint change sends only that endpoint, not the service", () => {
    const brain = brainWith([
      svc(),
      slice({
        endpoints: [
          { ip: v4.pod(1, 1), pod: "a" },
          { ip: v4.pod(1, 2), pod: "b" },
        ],
      }),
    ]);
    const before = brain.view("n").state!;
    brain.apply([
      {
        type: "upsert",
        object: slice({
          endpoints: [
            { ip: v4.pod(1, 1), pod: "a" },
            { ip: v4.pod(1, 3), pod: "c" },
          ],
        }),
      },
    ]);
    brain.flush();
    expect(show(stateOps(before.services, brain.view("n").state!.services, ["default/web"]))).toEqual([
      "deleteEndpoint default/web/b",
      "setEndpoint default/web/c",
    ]);
  });

  test("applyIncremental drives an incremental backend with the same calls, then one sync", async () => {
    const calls: string[] = [];
    const rec: IncrementalBackend = {
      kind: "incremental",
      name: "rec",
      setService: (s) => calls.push(`setService ${s.Namespace}/${s.Name}`),
      deleteService: (ns, n) => calls.push(`deleteService ${ns}/${n}`),
      setEndpoint: (ns, s, k) => calls.push(`setEndpoint ${ns}/${s}/${k}`),
      deleteEndpoint: (ns, s, k) => calls.push(`deleteEndpoint ${ns}/${s}/${k}`),
      sync: async () => void calls.push("sync"),
    };
    const st = brainWith([svc(), slice({ endpoints: [{ ip: v4.pod(1, 1), pod: "a" }] })]).view("n").state!;
    await applyIncremental(rec, null, st, null);
    expect(calls).toEqual(["setService default/web", "setEndpoint default/web/a", "sync"]);
  });
});
