// kube-proxy records its IPVS deprecation as a Warning event on its Node;
// kpng does the same when it runs the ipvs backend against a cluster. Here
// kpng runs from source (`--dry-run --once`, so no kernel is touched)
// against the real kube-apiserver 1.36.2 + etcd (test/harness/kube-apiserver.ts)
// as kube-proxy's user, and the event is read back with kubectl. The in-repo
// API server stays for the faults the real one cannot be made to answer
// (a 403 to kube-proxy's user, a 500, a server that never answers), and
// the recorder itself runs in process for the failure paths that must not
// hold start-up.

import { afterAll, beforeAll, beforeEach, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { IPVS_DEPRECATION_MESSAGE, IPVS_DEPRECATION_REASON } from "../../plugins/ipvs/index.ts";
import { defaultConfig } from "../../src/core/config/config.ts";
import { makeEvent, microTime, nodeRef, recordNodeEvent, type EventFields } from "../../src/core/node/events.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { loadKubeConfig } from "../../src/core/sources/kubeconfig.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { eventsV1Errors, FakeApiServer } from "../harness/api-server.ts";
import { loadedBound } from "../harness/load.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";
import { NODE, tempDir, testCert } from "../sources/kube/helpers.ts";

const root = join(import.meta.dir, "../..");
const tmp = tempDir("kpng-events-");
let api: FakeApiServer;
let kubeconfig: string;

beforeAll(async () => {
  api = await FakeApiServer.start(testCert(tmp.dir));
  api.apply(node(NODE, { ips: [v4.node(1)] }));
  api.apply(svc({ name: "web", clusterIPs: [v4.clusterIP(10)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }));
  api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }));
  kubeconfig = api.writeKubeconfig(tmp.dir);
});

afterAll(async () => {
  await api?.close();
  tmp.remove();
});

beforeEach(() => {
  api.events.length = 0;
  api.eventReply = undefined;
});

/** `kpng --kubeconfig K ARGS --dry-run --once` from source; not spawnSync: the API server lives in this process. */
async function kpngOnce(args: readonly string[], kc = kubeconfig) {
  const p = Bun.spawn(
    [process.execPath, join(root, "src/main.ts"), "--kubeconfig", kc, "--hostname-override", NODE, "--dry-run", "--once", ...args],
    {
      cwd: root,
      stdout: "pipe",
      stderr: "pipe",
      timeout: 30_000,
    },
  );
  const [out, err] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text()]);
  return { code: await p.exited, out, err };
}

const real = haveK8s("kpng's Node events against a real API server");

describe.skipIf(!real)("kpng against the real kube-apiserver: the IPVS deprecation as a Node Warning event", () => {
  let kapi: KubeApiServer;
  let kc: string;
  /** kpng's events in "default", as the API server stores them (events.k8s.io/v1), read with kubectl */
  const storedEvents = async () =>
    (
      JSON.parse(await kapi.kubectl(["get", "events.v1.events.k8s.io", "-n", "default", "-o", "json"])) as {
        items: Record<string, unknown>[];
      }
    ).items;

  beforeAll(async () => {
    kapi = await sharedApiServer();
    await kapi.apply(
      node(NODE, { ips: [v4.node(1)] }),
      svc({ name: "web", clusterIPs: [v4.clusterIP(10)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }),
      slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }),
    );
    // kube-proxy's own rights (system:node-proxier): those it records events with
    kc = kapi.writeKubeconfig(join(tmp.dir, "real-kubeconfig"), { user: "kube-proxy" });
  }, 90_000);
  beforeEach(async () => {
    if (!kapi) return;
    const res = await kapi.request("DELETE", "/apis/events.k8s.io/v1/namespaces/default/events");
    expect(res.status).toBe(200);
  });

  test.each([
    { name: "--backend ipvs", args: ["--backend", "ipvs"] },
    { name: "--proxy-mode ipvs (kube-proxy's flag)", args: ["--proxy-mode", "ipvs"] },
  ])(
    '$name: kube-proxy\'s event, on this Node, in "default", stored through events.k8s.io/v1',
    async ({ args }) => {
      const r = await kpngOnce(args, kc);
      expect(r.code).toBe(0);
      expect(r.out).toContain(`-A -t ${v4.clusterIP(10)}:80 -s rr`);
      expect(r.err).not.toContain("could not record event");
      const events = await storedEvents();
      expect(events).toHaveLength(1);
      const ev = events[0];
      expect(ev).toMatchObject({
        metadata: { namespace: "default" },
        type: "Warning",
        reason: IPVS_DEPRECATION_REASON,
        note: IPVS_DEPRECATION_MESSAGE,
        action: "StartKubeProxy",
        reportingController: "kpng",
      });
      expect(ev.regarding).toEqual({ kind: "Node", name: NODE, uid: NODE });
      expect((ev.metadata as { name: string }).name).toMatch(new RegExp(`^${NODE}\\.[0-9a-f]+$`));
      expect(ev.reportingInstance).toMatch(/^kpng-./);
      expect(ev.eventTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      // the core v1 view of the same event (kubectl get events) names the Node too
      const core = JSON.parse(await kapi.kubectl(["get", "events", "-n", "default", "-o", "json"])) as {
        items: Array<{ involvedObject: { kind: string; name: string }; reason: string; type: string }>;
      };
      expect(core.items.map((e) => [e.type, e.reason, e.involvedObject.kind, e.involvedObject.name])).toEqual([
        ["Warning", IPVS_DEPRECATION_REASON, "Node", NODE],
      ]);
    },
    40_000,
  );

  test("--backend nft: no event is recorded", async () => {
    const r = await kpngOnce(["--backend", "nft"], kc);
    expect(r.code).toBe(0);
    expect(r.out).toContain("table ip kpng");
    expect(await storedEvents()).toEqual([]);
  }, 40_000);
});

describe("kpng against a cluster that refuses the event (the in-repo API server: an injected fault)", () => {
  test("the API server refuses the event (403, RBAC): a warning, and kpng syncs and exits 0", async () => {
    api.eventReply = 403;
    const r = await kpngOnce(["--backend", "ipvs"]);
    expect(api.events.map((e) => e.status)).toEqual([403]);
    expect(r.code).toBe(0);
    expect(r.out).toContain(`-A -t ${v4.clusterIP(10)}:80 -s rr`);
    expect(r.err).toMatch(
      /WARN kpng\/events: could not record event reason=IPVSDeprecation .*HTTP 403: events\.events\.k8s\.io is forbidden/,
    );
  }, 40_000);
});

describe("the event as client-go's events recorder writes it", () => {
  const now = new Date("2030-01-02T03:04:05.678Z");
  const fields = (f: Partial<EventFields> = {}): EventFields => ({
    regarding: nodeRef(NODE),
    type: "Warning",
    reason: "R",
    action: "A",
    note: "n",
    ...f,
  });
  test.each([
    { name: "a Node (cluster-scoped): namespace default", f: fields(), namespace: "default" },
    {
      name: "a namespaced object: its own namespace",
      f: fields({ regarding: { kind: "Service", name: "web", namespace: "shop" } }),
      namespace: "shop",
    },
  ])("$name", ({ f, namespace }) => {
    const ev = makeEvent(f, { now, instance: "kpng-host" });
    expect(ev.metadata).toEqual({ name: `${f.regarding.name}.${(BigInt(now.getTime()) * 1_000_000n).toString(16)}`, namespace });
    expect(ev.eventTime).toBe("2030-01-02T03:04:05.678000Z");
    expect(eventsV1Errors(ev as unknown as Record<string, unknown>, namespace)).toEqual([]);
  });

  test("the test API server refuses what the real one refuses", () => {
    const ev = makeEvent(fields(), { now, instance: "kpng-host" }) as unknown as Record<string, unknown>;
    expect(eventsV1Errors({ ...ev, eventTime: now.toISOString(), deprecatedSource: { component: "kpng" } }, "default")).toEqual([
      "eventTime: Required value",
      "deprecatedSource: Invalid value: needs to be unset",
    ]);
    expect(eventsV1Errors(ev, "kube-public")).toEqual(["regarding.namespace: Invalid value: does not match event.namespace"]);
  });

  test("microseconds always carry six digits (metav1.MicroTime)", () => {
    expect(microTime(new Date("2030-01-02T03:04:05Z"))).toBe("2030-01-02T03:04:05.000000Z");
  });

  test("a note past 1024 bytes is cut, as the API server would refuse it", () => {
    const ev = makeEvent(fields({ note: "é".repeat(600) }), { now });
    expect(Buffer.byteLength(ev.note)).toBeLessThanOrEqual(1024);
    expect(ev.note.endsWith("é...")).toBe(true);
  });
});

describe("recording never holds start-up", () => {
  const config = defaultConfig({ nodeName: NODE });
  test.each([
    {
      name: "an API server that never answers: given up after the timeout",
      setup: () => void (api.eventReply = "hang"),
      want: /TimeoutError|timed? ?out|abort/i,
    },
    { name: "an API server that fails (500): a warning", setup: () => void (api.eventReply = 500), want: /HTTP 500: injected failure/ },
  ])("$name", async ({ setup, want }) => {
    setup();
    const log = memoryLogger();
    const start = performance.now();
    // A timeout the request outlives on its way in, stretched by the load: at load 12 on 2 cores
    // a 300 ms one ran out before the POST reached the server (no event there; for the 500, a
    // timeout instead of its warning).
    const timeoutMs = loadedBound(1000);
    await recordNodeEvent(
      { config, log, access: loadKubeConfig({ kubeconfig }), timeoutMs },
      { type: "Warning", reason: "R", action: "A", note: "n" },
    );
    // the promise: given up within 3 s (the timeout and the warning) on a machine with a core to spare
    expect(performance.now() - start).toBeLessThan(loadedBound(3000));
    expect(api.events).toHaveLength(1);
    const warning = log.lines.find((l) => l.includes("WARN") && l.includes("could not record event"));
    expect(warning).toMatch(want);
  });

  test("an API server that is down: a warning", async () => {
    const gone = await FakeApiServer.start();
    const access = loadKubeConfig({ kubeconfig: gone.writeKubeconfig(tmp.dir, "gone-kubeconfig") });
    await gone.close();
    const log = memoryLogger();
    await recordNodeEvent({ config, log, access, timeoutMs: 1000 }, { type: "Warning", reason: "R", action: "A", note: "n" });
    expect(log.lines.some((l) => l.includes("WARN") && l.includes("could not record event reason=R"))).toBe(true);
  });
});
