// The introspection API in memory (Connect's router transport): what
// GetServices answers from a brain's state (frontends per port, policies,
// affinity, source ranges, endpoints' conditions), its filters, and what
// the process's backends tell it (revision, apply time, last error, their
// read-back: a backend without one is never clean).

import { describe, expect, test } from "bun:test";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { createClient, createRouterTransport, type Client } from "@connectrpc/connect";
import { Introspect, type FilterSchema } from "../../src/gen/introspectv1/introspect_pb.ts";
import { mergeReplies } from "../../src/core/introspect/client.ts";
import { Brain } from "../../src/core/brain/brain.ts";
import { kinds } from "../../src/core/brain/k8s/objects.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import { introspectRoutes } from "../../src/core/introspect/routes.ts";
import { verifyStatus } from "../../src/core/introspect/format.ts";
import { SERVICES_PER_MESSAGE } from "../../src/core/introspect/services.ts";
import type { Backend } from "../../src/host/backend.ts";
import { BackendsIntrospection } from "../../src/host/introspect.ts";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { brainWith, upsertEvents } from "../api/brain-fixture.ts";

const NODE = "node-1";

function brain(): Brain {
  const b = new Brain();
  b.apply(
    upsertEvents([
      node(NODE, { ips: [v4.node(1)], zone: "a" }),
      svc({
        ns: "shop",
        name: "front",
        type: "LoadBalancer",
        clusterIPs: [v4.clusterIP(12)],
        ports: [{ name: "https", protocol: "TCP", port: 443, targetPort: 8443, nodePort: 31443 }],
        eTP: "Local",
        externalIPs: [v4.clusterIP(200)],
        lbIngress: [{ ip: "198.18.64.1" }],
        sourceRanges: ["198.18.128.0/24"],
        affinity: 600,
        healthCheckNodePort: 32100,
      }),
      slice({
        ns: "shop",
        service: "front",
        ports: [{ name: "https", protocol: "TCP", port: 8443 }],
        endpoints: [
          { ip: v4.pod(1, 30), node: NODE, pod: "front-1", zone: "a" },
          { ip: v4.pod(3, 30), node: "node-3", pod: "front-2", zone: "b" },
        ],
      }),
      svc({ ns: "shop", name: "web", clusterIPs: [v4.clusterIP(10)] }),
      svc({ ns: "default", name: "web", clusterIPs: [v4.clusterIP(11)] }),
    ]),
  );
  for (const k of kinds) b.markSynced(k);
  b.flush();
  return b;
}

/** the client with GetServices' stream collected into one reply, as kpng get merges it */
const streamed = (c: Client<typeof Introspect>) => ({
  verify: c.verify,
  getServices: async (f: MessageInitShape<typeof FilterSchema>) => mergeReplies(await Array.fromAsync(c.getServices(f))),
});

const fullBackend = (name: string, extra: Partial<Backend> = {}): Backend =>
  ({ name, kind: "full", apply: async () => {}, ...extra }) as Backend;

describe("GetServices", () => {
  const b = brain();
  let now = 1_700_000_000_000;
  const nft = fullBackend("nft");
  const source = new BackendsIntrospection([nft], ["primary"], () => now);
  const client = streamed(createClient(Introspect, createRouterTransport(introspectRoutes({ brain: b, defaultNodeName: NODE, source }))));

  test("every frontend of a port: cluster IP, node port on each node-port address, external and LB IPs, each with its scope", async () => {
    const reply = await client.getServices({ namespace: "shop", name: "front" });
    expect(reply.services.map((s) => s.name)).toEqual(["front"]);
    const port = reply.services[0].ports[0];
    expect([port.name, port.protocol, port.port, port.nodePort]).toEqual(["https", "TCP", 443, 31443]);
    expect(port.frontends.map((f) => [f.kind, f.ip, f.port, f.scope])).toEqual([
      ["clusterIP", v4.clusterIP(12), 443, "internal"],
      ["nodePort", v4.node(1), 31443, "external"],
      ["externalIP", v4.clusterIP(200), 443, "external"],
      ["loadBalancerIP", "198.18.64.1", 443, "external"],
    ]);
    expect(reply.nodePortAddresses).toEqual([v4.node(1)]);
  });

  test("policies, affinity, source ranges and the health-check node port", async () => {
    const s = (await client.getServices({ namespace: "shop", name: "front" })).services[0];
    expect([s.internalTrafficPolicy, s.externalTrafficPolicy, s.affinityTimeoutSeconds, s.sourceRanges, s.healthCheckNodePort]).toEqual([
      "Cluster",
      "Local",
      600,
      ["198.18.128.0/24"],
      32100,
    ]);
  });

  test("endpoints: both scopes, the other node's endpoint left out of the external one (eTP=Local)", async () => {
    const s = (await client.getServices({ namespace: "shop", name: "front" })).services[0];
    expect(s.endpoints.map((e) => [e.ip, e.nodeName, e.zone, e.internal?.used, e.external?.used, e.external?.reason, e.ports])).toEqual([
      [v4.pod(1, 30), NODE, "a", true, true, "", { https: 8443 }],
      [v4.pod(3, 30), "node-3", "b", true, false, "OtherNode", { https: 8443 }],
    ]);
  });

  test("filters: all, a namespace, one Service; sorted by namespace/name", async () => {
    const names = async (f: { namespace?: string; name?: string }) =>
      (await client.getServices(f)).services.map((s) => `${s.namespace}/${s.name}`);
    expect(await names({})).toEqual(["default/web", "shop/front", "shop/web"]);
    expect(await names({ namespace: "shop" })).toEqual(["shop/front", "shop/web"]);
    expect(await names({ namespace: "shop", name: "web" })).toEqual(["shop/web"]);
    expect(await names({ namespace: "nope" })).toEqual([]);
  });

  test("the revision each backend holds, when it was applied, and a later failure", async () => {
    const state = b.view(NODE).state as NodeState;
    expect((await client.getServices({})).backends.map((x) => [x.name, x.revision])).toEqual([["nft", 0n]]);
    source.synced(nft, state, 0.004);
    now += 5000;
    source.failed(nft, new Error("nft -f: refused"));
    const reply = await client.getServices({});
    expect(reply.revision).toBe(BigInt(state.rev));
    expect(reply.backends.map((x) => [x.name, x.revision, x.appliedUnixMs, x.syncSeconds, x.error])).toEqual([
      ["nft", BigInt(state.rev), 1_700_000_000_000n, 0.004, "nft -f: refused"],
    ]);
  });
});

test("a big answer streams in pieces of SERVICES_PER_MESSAGE, the node's fields first", async () => {
  const big = brainWith({ services: 250, endpoints: 2 });
  const c = createClient(Introspect, createRouterTransport(introspectRoutes({ brain: big, defaultNodeName: "node-1" })));
  const parts = await Array.fromAsync(c.getServices({}));
  expect(parts.map((p) => [p.nodeName, p.services.length])).toEqual([
    ["node-1", 0],
    ["", SERVICES_PER_MESSAGE],
    ["", SERVICES_PER_MESSAGE],
    ["", 250 - 2 * SERVICES_PER_MESSAGE],
  ]);
  expect(mergeReplies(parts).services).toHaveLength(250);
});

describe("Verify", () => {
  const b = brain();
  const verifyOf = (backends: readonly Backend[]) =>
    createClient(
      Introspect,
      createRouterTransport(introspectRoutes({ brain: b, defaultNodeName: NODE, source: new BackendsIntrospection(backends, []) })),
    ).verify;
  const drift = { service: "shop/web", frontend: `${v4.clusterIP(10)}:80/TCP`, kind: "missing" as const, detail: "rule" };
  const asked: Array<string | undefined> = [];
  const drifty = fullBackend("nft", { verify: async (s?: string) => (asked.push(s), s === undefined || s === "shop/web" ? [drift] : []) });

  test.each([
    { name: "every backend clean: clean", backends: [fullBackend("a", { verify: async () => [] })], want: "clean" },
    { name: "a drift: drift", backends: [drifty], want: "drift" },
    {
      name: "a backend without verify: unsupported, never clean",
      backends: [fullBackend("a", { verify: async () => [] }), fullBackend("b")],
      want: "unsupported",
    },
    {
      name: "a failed read: drift (not clean)",
      backends: [fullBackend("a", { verify: () => Promise.reject(new Error("nft list: permission denied")) })],
      want: "drift",
    },
  ])("$name", async ({ backends, want }) => {
    expect(verifyStatus(await verifyOf(backends)({}))).toBe(want);
  });

  test("the Service asked for reaches the backend's verify as namespace/name", async () => {
    asked.length = 0;
    const verify = verifyOf([drifty]);
    expect((await verify({ namespace: "shop", name: "web" })).backends[0].drifts.map((d) => d.service)).toEqual(["shop/web"]);
    expect((await verify({ namespace: "default", name: "web" })).backends[0].drifts).toEqual([]);
    expect((await verify({})).backends[0].drifts).toHaveLength(1);
    expect(asked).toEqual(["shop/web", "default/web", undefined]);
  });

  test("a node's kpng shows its own node only (another view would be recomputed at every change for good)", async () => {
    const client = streamed(
      createClient(
        Introspect,
        createRouterTransport(introspectRoutes({ brain: b, defaultNodeName: NODE, source: new BackendsIntrospection([], []) })),
      ),
    );
    await expect(client.getServices({ nodeName: "node-3" })).rejects.toThrow('this kpng proxies node "node-1" only');
    expect((await client.getServices({ nodeName: NODE })).nodeName).toBe(NODE);
  });

  test("kpng serve: a node the cluster does not have is not found (no view is made for it)", async () => {
    const client = streamed(createClient(Introspect, createRouterTransport(introspectRoutes({ brain: b, defaultNodeName: "" }))));
    await expect(client.getServices({ nodeName: "no-such-node" })).rejects.toThrow('node "no-such-node" is not a Node in the cluster');
  });

  test("kpng serve (no source): no backend", async () => {
    const client = streamed(createClient(Introspect, createRouterTransport(introspectRoutes({ brain: b, defaultNodeName: "" }))));
    expect((await client.verify({})).backends).toEqual([]);
    await expect(client.getServices({})).rejects.toThrow("no node name");
    expect((await client.getServices({ nodeName: NODE })).services).toHaveLength(3);
  });
});
