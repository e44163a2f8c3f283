// The whole kpng process in a node namespace, default flags, real packets
// from a client namespace: node ports answer on the Node's InternalIP from
// the input file, and follow it when an edit of the file changes it.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { v4 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { BUN, ROOT } from "../harness/kpng-process.ts";

const NODE_PORT = 30080;
let topo: Topology;
let kpng: Bun.Subprocess<"ignore", "ignore", "ignore"> | undefined;
const dir = mkdtempSync(join(tmpdir(), "kpng-nodeip-"));
const input = join(dir, "cluster.json");

/** The cluster: Node node-a with `nodeIP`, a NodePort service whose endpoint is pod0. */
function writeCluster(nodeIP: string) {
  const pod = topo.pods[0];
  const doc = {
    apiVersion: "v1",
    kind: "List",
    items: [
      { apiVersion: "v1", kind: "Node", metadata: { name: "node-a" }, status: { addresses: [{ type: "InternalIP", address: nodeIP }] } },
      {
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "web", namespace: "default" },
        spec: {
          type: "NodePort",
          clusterIP: v4.clusterIP(1),
          clusterIPs: [v4.clusterIP(1)],
          ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080, nodePort: NODE_PORT }],
        },
      },
      {
        apiVersion: "discovery.k8s.io/v1",
        kind: "EndpointSlice",
        metadata: { name: "web-1", namespace: "default", labels: { "kubernetes.io/service-name": "web" } },
        addressType: "IPv4",
        ports: [{ name: "http", port: 8080, protocol: "TCP" }],
        endpoints: [{ addresses: [pod.v4], conditions: { ready: true }, nodeName: "node-a" }],
      },
    ],
  };
  // As an editor saves: a new file renamed over the old one.
  writeFileSync(`${input}.tmp`, JSON.stringify(doc));
  renameSync(`${input}.tmp`, input);
}

async function until<T>(what: string, check: () => Promise<T | undefined>, timeoutMs = 10_000): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(100);
  }
}

const nodePortIPs = async () => {
  const out = await topo.exec(topo.node.ns, ["nft", "-j", "list", "set", "ip", "kpng", "nodeport-ips"]);
  const set = (JSON.parse(out).nftables as Array<{ set?: { elem?: unknown[] } }>).find((o) => o.set)?.set;
  return (set?.elem ?? []).map(String);
};

beforeAll(async () => {
  topo = await createTopology({ pods: 1, prefix: "kptn" });
  await topo.serve(topo.pods[0], { tcp: [8080] });
  // The node's second address, the one the Node object moves to (on the client-facing link).
  await topo.exec(topo.node.ns, ["ip", "addr", "add", `${v4.node(1)}/32`, "dev", "ext0"]);
  writeCluster(topo.node.v4);
  // What an operator runs; HOME: nft's interactive mode writes a history file there.
  kpng = Bun.spawn(
    ["ip", "netns", "exec", topo.node.ns, BUN, join(ROOT, "src/main.ts"), "--input", input, "--node-name", "node-a", "--backend", "nft"],
    {
      cwd: ROOT,
      stdin: "ignore",
      stdout: "ignore",
      stderr: "ignore",
      env: { ...process.env, HOME: "/dev/null" },
    },
  );
});

afterAll(async () => {
  kpng?.kill("SIGTERM");
  await kpng?.exited;
  await topo?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

describe("nft node ports follow the Node's IP (whole process, default flags)", () => {
  test("at start-up: the Node's InternalIP answers the node port", async () => {
    await until("nodeport-ips = the Node's IP", async () => ((await nodePortIPs()).join() === topo.node.v4 ? true : undefined));
    const r = await topo.probe(topo.client.ns, { ip: topo.node.v4, port: NODE_PORT, timeout: 2 });
    expect(r).toMatchObject({ ok: true, who: "pod0" });
  });

  test("the file moves the Node to another IP: node ports move with it, the old IP no longer answers", async () => {
    writeCluster(v4.node(1));
    await until("nodeport-ips = the new IP", async () => ((await nodePortIPs()).join() === v4.node(1) ? true : undefined));
    const [now, before] = await topo.probeMany(topo.client.ns, [
      { ip: v4.node(1), port: NODE_PORT, timeout: 2 },
      { ip: topo.node.v4, port: NODE_PORT, timeout: 2 },
    ]);
    expect(now).toMatchObject({ ok: true, who: "pod0" });
    expect(before).toMatchObject({ ok: false });
  });
});
