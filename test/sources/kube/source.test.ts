// The Kubernetes source, through the real list/watch protocol over HTTPS, in
// protobuf and in JSON. Following the cluster (creates, updates, deletes, an
// object leaving the selector, a Node heartbeat, another proxy's services)
// against the real kube-apiserver 1.36.2 (test/harness/kube-apiserver.ts),
// objects written with kubectl.
//
// The rest stays on the in-repo API server (test/harness/api-server.ts,
// FakeApiServer, held to the real one's bytes by wire-real.test.ts), because
// it needs what the real server cannot be made to do or does not show: the
// requests kpng sent (query, Accept header, pages, connections: the fake
// records them), a streamed list cut midway, the WatchList gate off, no watch
// cache, a server answering JSON only, injected HTTP 500s and failures
// between pages, dropped connections, BOOKMARKs and compactions on demand
// (410 Gone at a chosen moment), an outage at a chosen moment with changes
// made meanwhile, and objects the real server's validation refuses (a port of
// 70000, a cluster IP that is no IP, undecodable protobuf bytes).

import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { v4 } from "../../fixtures/addresses.ts";
import { node, slice, svc } from "../../fixtures/k8s.ts";
import { defaultKubeProxyConfig } from "../../../src/core/config/kube-proxy-config.ts";
import type { Config } from "../../../src/core/config/config.ts";
import { JSON_TYPE, PROTOBUF_TYPE as PROTOBUF } from "../../../src/core/kube-http/content.ts";
import { FakeApiServer } from "../../harness/api-server.ts";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";
import { haveK8s, type KubeApiServer, sharedApiServer } from "../../harness/kube-apiserver.ts";
import { NODE, rig, rigAt, tempDir, testCert, waitFor, type Rig } from "./helpers.ts";

// waits are bounded by their condition, up to LOADED_WAIT_MS each (issue 38: no test may depend
// on an idle machine): a test's own timeout leaves room for two, so a hang fails on the wait that
// names what it awaited
setDefaultTimeout(150_000);
const tmp = tempDir();
let cert: ReturnType<typeof testCert>;
const open: Array<{ close(): Promise<void> }> = [];
const real = haveK8s("kube source against the real API server");
const servers: FakeApiServer[] = [];

beforeAll(() => {
  cert = testCert(tmp.dir);
});
afterEach(async () => {
  for (const r of open.splice(0)) await r.close();
  for (const s of servers.splice(0)) await s.close();
});
afterAll(() => tmp.remove());

/** An API server holding this node and one service "web" with one local endpoint. */
async function cluster(): Promise<FakeApiServer> {
  const api = await FakeApiServer.start(cert);
  servers.push(api);
  api.apply(node(NODE, { ips: [v4.node(1)], zone: "zone-a" }));
  api.apply(svc({ name: "web" }));
  api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }));
  return api;
}

/** kube-proxy's default content type (protobuf), or JSON: every case below runs both ways */
let contentType = PROTOBUF;
const asked = (cfg: Partial<Config> = {}): Partial<Config> => {
  const kubeProxy = defaultKubeProxyConfig();
  kubeProxy.clientConnection.contentType = contentType;
  return { kubeProxy, ...cfg };
};

/** The real API server holding this node and one service "web" with one local endpoint (and its own default/kubernetes). */
async function realCluster(): Promise<KubeApiServer> {
  const kube = await sharedApiServer();
  await kube.apply(
    node(NODE, { ips: [v4.node(1)], zone: "zone-a" }),
    svc({ name: "web" }),
    slice({ service: "web", endpoints: [{ ip: v4.pod(1, 5), node: NODE }] }),
  );
  return kube;
}

async function startedAt(kube: KubeApiServer, cfg: Partial<Config> = {}): Promise<Omit<Rig, "api">> {
  const r = await rigAt(kube.writeKubeconfig(`${tmp.dir}/kubeconfig-real`), asked(cfg));
  open.push(r);
  await waitFor("revision 1", () => r.rev() >= 1, LOADED_WAIT_MS);
  return r;
}

async function started(api: FakeApiServer, cfg: Partial<Config> = {}): Promise<Rig> {
  const r = await rig(api, tmp.dir, asked(cfg));
  open.push(r);
  await waitFor("revision 1", () => r.rev() >= 1);
  return r;
}

const watchesOf = (api: FakeApiServer, path: string) => api.requests.filter((q) => q.watch && q.path === path);
/** list and watch requests (not the GET of this node by name) */
const collections = (api: FakeApiServer) => api.requests.filter((q) => !q.path.startsWith("/api/v1/nodes/"));
const listsOf = (api: FakeApiServer) => collections(api).filter((q) => !q.watch);

for (const type of [PROTOBUF, JSON_TYPE]) {
  describe(`asking for ${type}`, () => {
    beforeAll(() => {
      contentType = type;
    });
    describe("kube source: what is asked for", () => {
      test("asked as client-go asks for kube-proxy's content type; answered in it", async () => {
        const api = await cluster();
        const r = await started(api);
        for (const q of api.requests) expect(q.accept).toBe(`${contentType}, */*`);
        const listed = r.log.lines.filter((l) => l.includes("listed"));
        expect(listed).toHaveLength(3);
        for (const l of listed) expect(l).toContain(`as=${contentType === PROTOBUF ? "protobuf" : "json"}`);
      });

      test("by pages: the first list asks for resourceVersion 0 (the watch cache: one answer); a relist after 410 for the latest, paged", async () => {
        const api = await cluster();
        api.watchList = false;
        for (let i = 0; i < 620; i++) api.apply(svc({ ns: "bulk", name: `s-${i}`, clusterIPs: [v4.clusterIP(100 + i)] }));
        const r = await started(api);
        const services = () => listsOf(api).filter((q) => q.path === "/api/v1/services");
        expect(services().map((q) => [q.query.resourceVersion, q.query.continue ?? ""])).toEqual([["0", ""]]);
        await waitFor("watches open", () => api.openWatches === 3);
        await api.down();
        api.apply(svc({ ns: "bulk", name: "late", clusterIPs: [v4.clusterIP(99)] }));
        api.compact();
        await api.up();
        await waitFor("the relist", () => r.keys().includes("bulk/late") && services().length === 3);
        const relist = services().slice(1);
        expect(relist.map((q) => q.query.resourceVersion ?? "")).toEqual(["", ""]);
        expect(relist[1].query.continue).toBeTruthy();
      });

      for (const watchList of [true, false]) {
        test(`kube-proxy's selectors: no other proxy's services, no headless slices, only this Node (${watchList ? "streamed list" : "list by pages"})`, async () => {
          const api = await cluster();
          api.watchList = watchList;
          await started(api);
          const q = Object.fromEntries((watchList ? collections(api) : listsOf(api)).map((r) => [r.path, r.query]));
          expect(q["/api/v1/services"].labelSelector).toBe("!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name");
          expect(q["/apis/discovery.k8s.io/v1/endpointslices"].labelSelector).toBe(
            "!service.kubernetes.io/headless,!service.kubernetes.io/service-proxy-name",
          );
          expect(q["/api/v1/nodes"].fieldSelector).toBe(`metadata.name=${NODE}`);
          if (!watchList) expect(q["/api/v1/services"].limit).toBe("500");
        });
      }

      test("the list is streamed as client-go 1.36 streams it: a watch with sendInitialEvents, ended by the BOOKMARK, then watched on", async () => {
        const api = await cluster();
        const r = await started(api);
        for (const q of collections(api))
          expect(q).toMatchObject({
            watch: true,
            query: { sendInitialEvents: "true", resourceVersionMatch: "NotOlderThan", allowWatchBookmarks: "true" },
          });
        for (const q of collections(api)) expect(q.query.resourceVersion ?? "").toBe("");
        expect(r.log.lines.filter((l) => l.includes("listed") && l.includes("via=watch"))).toHaveLength(3);
        api.apply(svc({ name: "later", clusterIPs: [v4.clusterIP(31)] }));
        await waitFor("the same stream, on as a watch", () => r.keys().includes("default/later"));
        expect(collections(api)).toHaveLength(3);
        // and, as kube-proxy's getNodeIPs, its own Node by name
        expect(api.requests.filter((q) => q.path === `/api/v1/nodes/${NODE}`)).toHaveLength(1);
      });

      test("a streamed list cut before its end BOOKMARK is listed again whole, by pages at once (client-go's fallback), then watched", async () => {
        const api = await cluster();
        for (let i = 0; i < 300; i++) api.apply(svc({ ns: "bulk", name: `s-${i}`, clusterIPs: [v4.clusterIP(100 + i)] }));
        api.cutNextStream = { kind: "Service", after: 150 };
        const services = () => api.requests.filter((q) => q.path === "/api/v1/services");
        const r = await started(api);
        expect(r.keys()).toHaveLength(301);
        expect(
          services()
            .slice(0, 2)
            .map((q) =>
              q.watch ? `watch sendInitialEvents=${q.query.sendInitialEvents}` : `list resourceVersion=${q.query.resourceVersion}`,
            ),
        ).toEqual(["watch sendInitialEvents=true", "list resourceVersion=0"]);
        expect(r.log.lines.filter((l) => l.includes("streamed list failed, listing page by page"))).toHaveLength(1);
        await waitFor("the watch after the list", () => watchesOf(api, "/api/v1/services").length === 2);
        expect(watchesOf(api, "/api/v1/services")[1].query.sendInitialEvents).toBeUndefined();
      });

      test("an API server that refuses streamed lists (WatchList gate off): listed by pages, as client-go falls back", async () => {
        const api = await cluster();
        api.watchList = false;
        const r = await started(api);
        expect(r.log.lines.filter((l) => l.includes("does not stream lists"))).toHaveLength(3);
        expect(r.log.lines.filter((l) => l.includes("listed") && l.includes("via=pages"))).toHaveLength(3);
        expect(listsOf(api)).toHaveLength(3);
      });

      test("by pages: a paginated list (more than one page of 500) is read whole", async () => {
        const api = await cluster();
        api.watchList = false;
        api.watchCache = false;
        for (let i = 0; i < 620; i++) api.apply(svc({ ns: "bulk", name: `s-${i}`, clusterIPs: [v4.clusterIP(100 + i)] }));
        const r = await started(api);
        expect(r.keys()).toHaveLength(621);
        expect(listsOf(api).filter((q) => q.path === "/api/v1/services" && q.query.continue)).toHaveLength(1);
      });

      test("requests share connections: a list of many pages does not pay a TLS handshake a page", async () => {
        const api = await cluster();
        api.watchList = false;
        api.watchCache = false;
        for (let i = 0; i < 2600; i++) api.apply(svc({ ns: "bulk", name: `s-${i}`, clusterIPs: [v4.clusterIP(100 + i)] }));
        await started(api);
        const pages = listsOf(api).length;
        expect(pages).toBe(8); // 6 of services, 1 of slices, 1 of nodes
        // each kind's next page is asked for while the last one is still read: two connections a kind at most
        expect(api.connections).toBeLessThanOrEqual(6);
      });
    });

    describe.skipIf(!real)("kube source: following the real kube-apiserver", () => {
      /** this node's services, but the API server's own default/kubernetes */
      const ours = (r: { keys(): string[] }) => r.keys().filter((k) => k !== "default/kubernetes");

      test("creates, updates and deletes are followed through the watch", async () => {
        const kube = await realCluster();
        const r = await startedAt(kube);
        expect(ours(r)).toEqual(["default/web"]);
        await kube.apply(svc({ name: "api", clusterIPs: [v4.clusterIP(20)] }));
        await waitFor("create", () => r.keys().includes("default/api"), LOADED_WAIT_MS);
        await kube.apply(svc({ name: "api", clusterIPs: [v4.clusterIP(20)], ports: [{ name: "http", port: 8080, targetPort: 80 }] }));
        await waitFor(
          "update",
          () => r.brain.view(NODE).state?.services.get("default/api")?.service.Ports[0]?.Port === 8080,
          LOADED_WAIT_MS,
        );
        await kube.remove("Service", "default", "api");
        await waitFor("delete", () => !r.keys().includes("default/api"), LOADED_WAIT_MS);
        expect(r.source.stats.relists).toBe(0);
      });

      test("an object that stops matching the selector is deleted (sent as DELETED)", async () => {
        const kube = await realCluster();
        const r = await startedAt(kube);
        await kube.apply(svc({ name: "web", labels: { "service.kubernetes.io/service-proxy-name": "someone-else" } }));
        await waitFor("web gone", () => !r.keys().includes("default/web"), LOADED_WAIT_MS);
      });

      test("a Node heartbeat (status the brain does not read) is no event for the brain", async () => {
        const kube = await realCluster();
        const r = await startedAt(kube);
        const before = r.brain.stats.events;
        const nodeEvents = r.source.stats.events.Node;
        const heartbeat = {
          conditions: [{ type: "Ready", status: "True", lastHeartbeatTime: new Date().toISOString(), reason: "KubeletReady" }],
        };
        await kube.kubectl(["patch", "node", NODE, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: heartbeat })]);
        await waitFor("node event received", () => r.source.stats.events.Node > nodeEvents, LOADED_WAIT_MS);
        // a window in which nothing may happen: the brain counts no event
        await Bun.sleep(50);
        expect(r.brain.stats.events).toBe(before);
      });

      test("a service labelled for another proxy is not served; with --service-proxy-name it is", async () => {
        const kube = await realCluster();
        await kube.apply(
          svc({ name: "mesh", clusterIPs: [v4.clusterIP(11)], labels: { "service.kubernetes.io/service-proxy-name": "mesh-proxy" } }),
          svc({ name: "other", clusterIPs: [v4.clusterIP(12)], labels: { "service.kubernetes.io/service-proxy-name": "someone-else" } }),
        );
        const plain = await startedAt(kube);
        expect(ours(plain)).toEqual(["default/web"]);
        const named = await startedAt(kube, { serviceProxyName: "mesh-proxy" });
        expect(ours(named)).toEqual(["default/mesh", "default/web"]);
      });
    });

    describe("kube source: following the cluster", () => {
      test("a burst of changes is recomputed at most once per min-sync-period", async () => {
        const api = await cluster();
        const r = await started(api, { minSyncPeriodSeconds: 0.5 });
        const flushes = r.source.stats.flushes;
        const revs = r.rev();
        for (let i = 0; i < 40; i++) api.apply(slice({ service: "web", endpoints: [{ ip: v4.pod(1, 10 + i), node: NODE }] }));
        await waitFor(
          "last change applied",
          () =>
            [...(r.brain.view(NODE).state?.services.get("default/web")?.endpoints.values() ?? [])].some(
              (e) => e.IPs?.V4[0] === v4.pod(1, 49),
            ),
          LOADED_WAIT_MS,
        );
        // 40 events: one flush at once (quiet before), one when the period ends.
        expect(r.source.stats.flushes - flushes).toBeLessThanOrEqual(2);
        expect(r.rev() - revs).toBeLessThanOrEqual(2);
      });
    });

    describe("kube source: resuming and relisting", () => {
      test("a dropped connection resumes the watch from the last resourceVersion, without a list", async () => {
        const api = await cluster();
        const r = await started(api);
        api.apply(svc({ name: "api", clusterIPs: [v4.clusterIP(20)] }));
        await waitFor("create", () => r.keys().includes("default/api"));
        const rv = api.resourceVersion;
        const lists = listsOf(api).length;
        const before = watchesOf(api, "/api/v1/services").length;
        api.dropConnections();
        await waitFor("watch re-opened", () => watchesOf(api, "/api/v1/services").length > before);
        expect(watchesOf(api, "/api/v1/services").at(-1)!.query.resourceVersion).toBe(rv);
        expect(listsOf(api)).toHaveLength(lists);
        expect(r.source.stats.relists).toBe(0);
      });

      test("a BOOKMARK moves the resume point forward", async () => {
        const api = await cluster();
        await started(api);
        // A BOOKMARK shows only in where the next watch resumes, and on a loaded machine the drop can
        // overtake it (read by the client after the connection is gone): so bookmark and drop until a
        // resumed watch asks from the BOOKMARK's resourceVersion (never, if BOOKMARKs are not read).
        const resumed = await waitFor(
          "a node watch resumed from the BOOKMARK",
          async () => {
            await waitFor("watches open", () => api.openWatches === 3, LOADED_WAIT_MS);
            api.apply({ kind: "ConfigMapLikeNoise", metadata: { name: "x" } }); // bumps the global resourceVersion only
            api.bookmark();
            await Bun.sleep(50);
            const before = watchesOf(api, "/api/v1/nodes").length;
            api.dropConnections();
            await waitFor("node watch re-opened", () => watchesOf(api, "/api/v1/nodes").length > before, LOADED_WAIT_MS);
            return watchesOf(api, "/api/v1/nodes").at(-1)!.query.resourceVersion === api.resourceVersion;
          },
          LOADED_WAIT_MS,
        );
        expect(resumed).toBe(true);
      });

      for (const goneAs of ["event", "http"] as const) {
        test(`410 Gone (${goneAs === "event" ? "ERROR event" : "HTTP status"}) relists; what changed meanwhile is picked up, nothing else is republished`, async () => {
          const api = await cluster();
          api.goneAs = goneAs;
          api.apply(svc({ name: "stays", clusterIPs: [v4.clusterIP(21)] }));
          const r = await started(api);
          await waitFor("watches open", () => api.openWatches === 3);
          await api.down();
          // Changes the client never sees as events, then history is compacted away.
          api.remove("Service", "default", "stays");
          api.apply(svc({ name: "new", clusterIPs: [v4.clusterIP(22)] }));
          api.compact();
          await api.up();
          await waitFor("relisted", () => r.keys().includes("default/new") && !r.keys().includes("default/stays"), LOADED_WAIT_MS);
          expect(r.source.stats.relists).toBeGreaterThanOrEqual(1);
          expect(r.keys()).toEqual(["default/new", "default/web"]);
        });
      }

      test("a first list that fails midway is listed again whole: what went meanwhile is not kept", async () => {
        const api = await cluster();
        api.watchList = false;
        api.watchCache = false;
        for (let i = 0; i < 620; i++) api.apply(svc({ ns: "bulk", name: `s-${i}`, clusterIPs: [v4.clusterIP(100 + i)] }));
        // The second page of services fails; as it does, a service of the first page goes.
        api.failNext(1, 500, { path: "/api/v1/services", continued: true, meanwhile: () => api.remove("Service", "bulk", "s-0") });
        const r = await started(api);
        expect(listsOf(api).filter((q) => q.path === "/api/v1/services" && !q.query.continue)).toHaveLength(2);
        expect(r.keys()).toHaveLength(620);
        expect(r.keys()).not.toContain("bulk/s-0");
      });

      test("a relist that brings back the same objects publishes no revision", async () => {
        const api = await cluster();
        const r = await started(api);
        await waitFor("watches open", () => api.openWatches === 3);
        const rev = r.rev();
        const events = r.brain.stats.events;
        // Another kind's write moves the server past every watch's resume point; then history goes.
        api.apply({ kind: "ConfigMapLikeNoise", metadata: { name: "x" } });
        api.compact();
        api.dropConnections();
        await waitFor("relists", () => r.source.stats.relists >= 3, LOADED_WAIT_MS);
        // a window in which nothing may happen: no revision, no event for the brain
        await Bun.sleep(50);
        expect(r.rev()).toBe(rev);
        expect(r.brain.stats.events).toBe(events);
      });
    });

    describe("kube source: an API server that is not there", () => {
      test("down at start-up: waits with backoff, then syncs when it comes up", async () => {
        const api = await cluster();
        await api.down();
        const pending = rig(api, tmp.dir, asked());
        // a window in which nothing may reach the server (it is down)
        await Bun.sleep(300);
        const failedTries = api.requests.length;
        expect(failedTries).toBe(0);
        await api.up();
        const r = await pending;
        open.push(r);
        await waitFor("revision 1", () => r.rev() === 1, LOADED_WAIT_MS);
        expect(r.keys()).toEqual(["default/web"]);
        expect(r.log.lines.some((l) => l.includes("list failed, keeping the last known state"))).toBe(true);
      });

      test("goes away and comes back: the state stays as it was meanwhile, no revision churn", async () => {
        const api = await cluster();
        const r = await started(api);
        await waitFor("watches open", () => api.openWatches === 3);
        const rev = r.rev();
        await api.down();
        await Bun.sleep(600); // several failed reconnections: a window in which the state must not move
        expect(r.rev()).toBe(rev);
        expect(r.keys()).toEqual(["default/web"]);
        await api.up();
        await waitFor("watches re-opened", () => api.openWatches === 3, LOADED_WAIT_MS);
        expect(r.rev()).toBe(rev);
        api.apply(svc({ name: "after", clusterIPs: [v4.clusterIP(23)] }));
        await waitFor("follows again", () => r.keys().includes("default/after"));
      });

      test("HTTP errors on list are retried", async () => {
        const api = await cluster();
        api.failNext(4, 500);
        const r = await started(api);
        expect(r.keys()).toEqual(["default/web"]);
        expect(r.log.lines.filter((l) => l.includes("HTTP 500")).length).toBeGreaterThanOrEqual(1);
      });
    });

    describe("kube source: bad objects", () => {
      test("an invalid object is skipped and logged; the rest keeps working", async () => {
        const api = await cluster();
        const bad = svc({ name: "bad", clusterIPs: [v4.clusterIP(30)] }) as { spec: { ports: Array<{ port: number }> } };
        bad.spec.ports[0].port = 70000;
        api.apply(bad as never);
        const r = await started(api);
        expect(r.keys()).toEqual(["default/web"]);
        expect(
          r.log.lines.some(
            (l) => l.includes("skipping invalid object") && l.includes("service default/bad spec.ports[0].port: 70000 is out of range"),
          ),
        ).toBe(true);
      });

      test("an object that turns invalid keeps its last valid version", async () => {
        const api = await cluster();
        const r = await started(api);
        const broken = svc({ name: "web" }) as { spec: { clusterIP: string; clusterIPs: string[] } };
        broken.spec.clusterIP = "not-an-ip";
        broken.spec.clusterIPs = ["not-an-ip"];
        api.apply(broken as never);
        await waitFor("warning", () => r.log.lines.some((l) => l.includes("skipping invalid object")));
        expect(r.keys()).toEqual(["default/web"]);
        expect(r.brain.view(NODE).state!.services.get("default/web")!.service.IPs!.ClusterIPs!.V4).toEqual([v4.clusterIP(10)]);
      });

      test("a relist that brings an invalid version keeps the last valid one too", async () => {
        const api = await cluster();
        const r = await started(api);
        await waitFor("watches open", () => api.openWatches === 3);
        await api.down();
        const broken = svc({ name: "web" }) as { spec: { ports: Array<{ port: number }> } };
        broken.spec.ports[0].port = 0;
        api.apply(broken as never);
        api.compact();
        await api.up();
        await waitFor("relisted", () => r.source.stats.relists >= 1, LOADED_WAIT_MS);
        await waitFor("warning", () =>
          r.log.lines.some((l) => l.includes("keeping its last valid version") && l.includes("service default/web")),
        );
        expect(r.keys()).toEqual(["default/web"]);
        expect(r.brain.view(NODE).state!.services.get("default/web")!.service.Ports[0].Port).toBe(80);
      });
    });
  });
}

describe("kube source: content types", () => {
  const withConnection = (conn: { contentType?: string; acceptContentTypes?: string }): Partial<Config> => {
    const kubeProxy = defaultKubeProxyConfig();
    Object.assign(kubeProxy.clientConnection, conn);
    return { kubeProxy };
  };

  test("an API server that answers JSON only (as for a kind without protobuf) is read as JSON, protobuf asked or not", async () => {
    const api = await cluster();
    api.protobuf = false;
    const r = await rig(api, tmp.dir, withConnection({ contentType: PROTOBUF }));
    open.push(r);
    await waitFor("revision 1", () => r.rev() >= 1);
    expect(api.requests[0].accept).toBe(`${PROTOBUF}, */*`);
    expect(r.log.lines.filter((l) => l.includes("listed") && l.includes("as=json"))).toHaveLength(3);
    api.apply(svc({ name: "later", clusterIPs: [v4.clusterIP(31)] }));
    await waitFor("the watch (JSON lines)", () => r.keys().includes("default/later"));
  });

  test("acceptContentTypes is the Accept header as written; the answer is read by its Content-Type", async () => {
    const api = await cluster();
    const r = await rig(api, tmp.dir, withConnection({ contentType: PROTOBUF, acceptContentTypes: `${JSON_TYPE}, ${PROTOBUF}` }));
    open.push(r);
    await waitFor("revision 1", () => r.rev() >= 1);
    for (const q of api.requests) expect(q.accept).toBe(`${JSON_TYPE}, ${PROTOBUF}`);
    expect(r.log.lines.filter((l) => l.includes("listed") && l.includes("as=json"))).toHaveLength(3);
  });

  test("an undecodable protobuf object is refused by name; its last valid version stays", async () => {
    const api = await cluster();
    const r = await rig(api, tmp.dir, withConnection({ contentType: PROTOBUF }));
    open.push(r);
    await waitFor("revision 1", () => r.rev() >= 1);
    api.apply(svc({ name: "web", ports: [{ name: "http", port: 81 }] }), { brokenProtobuf: true });
    await waitFor("the refusal", () => r.log.lines.find((l) => l.includes("service default/web: protobuf:")));
    expect(r.keys()).toEqual(["default/web"]);
    expect(r.brain.cluster.get("Service", "default", "web")).toMatchObject({ spec: { ports: [{ port: 80 }] } });
  });
});
