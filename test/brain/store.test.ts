// The revisioned store: no partial state, a revision only when this node's
// result changed, work proportional to the change, identity for what did not.

import { describe, expect, test } from "bun:test";
import { Brain, type Revision } from "../../src/core/brain/brain.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { brainWith } from "./helpers.ts";

const up = (object: Parameters<Brain["apply"]>[0] extends Iterable<infer E> ? (E extends { object: infer O } ? O : never) : never) => ({
  type: "upsert" as const,
  object,
});

describe("revisions", () => {
  test("no state before every kind has synced; revision 1 right after", () => {
    const brain = new Brain();
    const view = brain.view("node-1");
    brain.apply([up(svc())]);
    brain.markSynced("Service");
    brain.markSynced("EndpointSlice");
    brain.flush();
    expect(view.state).toBeNull();
    brain.markSynced("Node");
    brain.flush();
    expect(view.state?.rev).toBe(1);
    expect(view.state?.services.has("default/web")).toBe(true);
  });

  test("a Service changed or deleted before the first state: the first state has its last version", () => {
    // Before the first state a service's model is made as it arrives; a later version must replace it.
    const brain = new Brain();
    const view = brain.view("node-1");
    brain.apply([up(svc({ ports: [{ name: "http", port: 80 }] })), up(svc({ name: "gone" }))]);
    brain.apply([
      up(svc({ ports: [{ name: "http", port: 8080 }] })),
      { type: "delete", kind: "Service", namespace: "default", name: "gone" },
    ]);
    for (const k of ["Service", "EndpointSlice", "Node"] as const) brain.markSynced(k);
    brain.flush();
    expect(view.state?.services.get("default/web")?.service.Ports.map((p) => p.Port)).toEqual([8080]);
    expect(view.state?.services.has("default/gone")).toBe(false);
  });

  test("an event that does not change this node's result produces no revision", () => {
    const brain = brainWith([svc(), slice({ endpoints: [{ ip: v4.pod(1, 1), node: "node-1" }] })]);
    const view = brain.view("node-1");
    const revs: Revision[] = [];
    view.subscribe((r) => revs.push(r));
    // same object again, and another node's label change
    brain.apply([up(svc()), up(node("node-2", { zone: "zone-x" }))]);
    brain.flush();
    expect(revs.map((r) => r.state.rev)).toEqual([1]);
  });

  test("churn on other nodes' endpoints of an eTP=Local+iTP=Local service: no revision", () => {
    const s = svc({ type: "NodePort", eTP: "Local", iTP: "Local", ports: [{ name: "http", port: 80, targetPort: 8080, nodePort: 30080 }] });
    const brain = brainWith([
      s,
      slice({
        endpoints: [
          { ip: v4.pod(1, 1), node: "node-1" },
          { ip: v4.pod(2, 1), node: "node-2" },
        ],
      }),
    ]);
    const view = brain.view("node-1");
    brain.apply([
      up(
        slice({
          endpoints: [
            { ip: v4.pod(1, 1), node: "node-1" },
            { ip: v4.pod(2, 2), node: "node-2" },
          ],
        }),
      ),
    ]);
    brain.flush();
    expect(view.state!.rev).toBe(1);
  });

  test("one changed slice: a revision whose change set names only its service; others keep their objects", () => {
    const objs = [
      svc({ name: "a" }),
      svc({ name: "b", clusterIPs: [v4.clusterIP(11)] }),
      slice({ service: "a", endpoints: [{ ip: v4.pod(1, 1) }] }),
      slice({ service: "b", endpoints: [{ ip: v4.pod(1, 2) }] }),
    ];
    const brain = brainWith(objs);
    const view = brain.view("node-1");
    const before = view.state!;
    const revs: Revision[] = [];
    view.subscribe((r) => revs.push(r));
    brain.apply([up(slice({ service: "a", endpoints: [{ ip: v4.pod(1, 1) }, { ip: v4.pod(1, 3) }] }))]);
    brain.flush();
    const after = view.state!;
    expect(after.rev).toBe(2);
    expect([...revs[1].change!]).toEqual(["default/a"]);
    expect(after.services.get("default/b")).toBe(before.services.get("default/b")!);
    // the unchanged endpoint and service of "a" keep their identity too
    const [oldA, newA] = [before.services.get("default/a")!, after.services.get("default/a")!];
    expect(newA.service).toBe(oldA.service);
    expect(newA.endpoints.get(`pod-${v4.pod(1, 1).replaceAll(".", "-")}`)).toBe([...oldA.endpoints.values()][0]);
    // and the previous snapshot was not mutated
    expect(before.services.get("default/a")!.endpoints.size).toBe(1);
  });

  // the count, not a time: recomputing every service would count 200 (1,000 proved no more, for 5 times the CPU)
  test("work grows with the change: one changed slice recomputes one service, at 10 or 200 services", () => {
    for (const n of [10, 200]) {
      const objs = Array.from({ length: n }, (_, i) => [
        svc({ name: `s${i}`, clusterIPs: [v4.clusterIP(i + 1)] }),
        slice({ service: `s${i}`, endpoints: [{ ip: v4.pod(1, 1) }] }),
      ]).flat();
      const brain = brainWith(objs);
      brain.view("node-1");
      const before = brain.stats.computed;
      brain.apply([up(slice({ service: "s3", endpoints: [{ ip: v4.pod(1, 2) }] }))]);
      brain.flush();
      expect(brain.stats.computed - before).toBe(1);
    }
  });

  test("deleting a service removes it; deleting its slice empties its endpoints", () => {
    const brain = brainWith([svc(), slice({ endpoints: [{ ip: v4.pod(1, 1) }] })]);
    const view = brain.view("node-1");
    brain.apply([{ type: "delete", kind: "EndpointSlice", namespace: "default", name: "web-ipv4" }]);
    brain.flush();
    expect(view.state!.services.get("default/web")!.endpoints.size).toBe(0);
    brain.apply([{ type: "delete", kind: "Service", namespace: "default", name: "web" }]);
    brain.flush();
    expect(view.state!.services.has("default/web")).toBe(false);
    expect(view.state!.rev).toBe(3);
  });

  test("a change of this node's zone recomputes topology", () => {
    const hinted = slice({
      endpoints: [
        { ip: v4.pod(1, 1), node: "node-1", forZones: ["zone-a"] },
        { ip: v4.pod(2, 1), node: "node-2", forZones: ["zone-b"] },
      ],
    });
    const brain = brainWith([node("node-1", { zone: "zone-a" }), svc(), hinted]);
    const view = brain.view("node-1");
    expect(view.state!.services.get("default/web")!.endpoints.size).toBe(1);
    brain.apply([up(node("node-1", { zone: "zone-c" }))]);
    brain.flush();
    expect(view.state!.services.get("default/web")!.endpoints.size).toBe(2);
  });

  test("several node names are served from one brain, each with its own local endpoints", () => {
    const brain = brainWith([
      svc({ iTP: "Local" }),
      slice({
        endpoints: [
          { ip: v4.pod(1, 1), node: "node-1" },
          { ip: v4.pod(2, 1), node: "node-2" },
        ],
      }),
    ]);
    const ips = (n: string) => [...brain.view(n).state!.services.get("default/web")!.endpoints.values()].map((e) => e.IPs!.V4[0]);
    expect(ips("node-1")).toEqual([v4.pod(1, 1)]);
    expect(ips("node-2")).toEqual([v4.pod(2, 1)]);
  });

  test("next(rev) waits for a newer revision", async () => {
    const brain = brainWith([svc()]);
    const view = brain.view("node-1");
    const p = view.next(1);
    let resolved = false;
    void p.then(() => (resolved = true));
    await Bun.sleep(5);
    expect(resolved).toBe(false);
    brain.apply([up(slice({ endpoints: [{ ip: v4.pod(1, 1) }] }))]);
    brain.flush();
    expect((await p).rev).toBe(2);
  });
});
