// The userspace backend as deployed: the whole kpng process in the node
// namespace with an operator's flags (`--input FILE --node-name N --backend
// userspace`), then the same code as a sidecar (`kpng serve` + `kpng backend
// --api unix://… --backend userspace`), each serving the deployed suite's
// cluster (test/deployed/cluster.ts) to a client outside the node. Where a
// relay cannot do what kernel rules do, the expected verdict says so.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { LOADED_WAIT_MS, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { slice } from "../fixtures/k8s.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import {
  asList,
  checks,
  clusterObjects,
  deniedClient,
  ips,
  NODE,
  podPorts,
  settledChecks,
  wanted,
  type K8sObject,
} from "../deployed/cluster.ts";

/** What differs from the kernel backends' verdicts, and why. */
function userspaceWants(topo: Topology): Record<string, string> {
  const list = checks(topo);
  return {
    ...wanted(list),
    // the relay accepted the connection before it could check the source: a reset, not silence
    "LoadBalancer IP: a client outside loadBalancerSourceRanges is dropped": "error",
    // a relayed connection comes from the node
    "eTP=Local with a local endpoint: served, the client's source kept": `pod2 from ${topo.node.v4}`,
    // the relay listens for pods and the node (short-circuit to the cluster's endpoints): an outside client is reset
    "eTP=Local without a local endpoint: node port traffic dropped": "error",
  };
}

interface Rig {
  topo: Topology;
  input: string;
  objects: K8sObject[];
  write(objects: K8sObject[]): void;
  dir: ReturnType<typeof tempDir>;
}

async function rig(prefix: string): Promise<Rig> {
  const topo = await createTopology({ pods: 3, prefix });
  for (const p of topo.pods) await topo.serve(p, podPorts);
  await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
  const dir = tempDir("kpng-userspace-");
  dir.create();
  const input = join(dir.path, "cluster.json");
  const write = (objects: K8sObject[]) => writeFileSync(input, JSON.stringify(asList(objects), null, 1));
  const objects = clusterObjects(topo);
  write(objects);
  return { topo, input, objects, write, dir };
}

const inNode = (topo: Topology) => ["ip", "netns", "exec", topo.node.ns];

describe("kpng --input FILE --node-name N --backend userspace", () => {
  let r: Rig;
  let kpng: KpngProcess;
  const start = async () => {
    kpng = startKpng(["--input", r.input, "--node-name", NODE, "--backend", "userspace"], { wrap: inNode(r.topo) });
    await kpng.waitFor(/ INFO kpng: synced /);
  };
  beforeAll(async () => {
    r = await rig("kpus");
    await start();
  }, 150_000);
  afterAll(async () => {
    await kpng?.stop("SIGKILL");
    await r?.topo.destroy();
    r?.dir.remove();
  });

  test("every service behaves for a client outside the node", async () => {
    expect(await settledChecks(r.topo, checks(r.topo), LOADED_WAIT_MS, userspaceWants(r.topo))).toEqual(userspaceWants(r.topo));
  }, 90_000);

  const syncs = () => kpng.stderr.filter((l) => / INFO kpng: synced /.test(l)).length;
  const nextSync = async (after: number) => {
    const deadline = Date.now() + LOADED_WAIT_MS;
    while (syncs() <= after && Date.now() < deadline) await Bun.sleep(50);
    expect(syncs()).toBeGreaterThan(after);
  };

  test("an edit of the file: endpoints for the empty service serve at once", async () => {
    const before = syncs();
    const filled = slice({
      service: "empty",
      ports: [{ name: "http", protocol: "TCP", port: 8080 }],
      endpoints: [{ ip: r.topo.pods[2].v4, node: NODE, pod: "pod2" }],
    });
    r.write([...r.objects, filled]);
    await nextSync(before);
    expect(await r.topo.probe(r.topo.client.ns, { ip: ips.empty, port: 80 })).toMatchObject({ ok: true, who: "pod2" });
    r.write(r.objects);
    await nextSync(before + 1);
  });

  test("a broken edit keeps the relays serving", async () => {
    writeFileSync(r.input, "{ not json");
    await kpng.waitFor(/input file not loaded, keeping the last good state/);
    expect(await r.topo.probe(r.topo.client.ns, { ip: ips.clusterIP, port: 80 })).toMatchObject({ ok: true });
    r.write(r.objects);
  });

  test("kill -9: the relays end with the process; a restart serves again on the routes left in place", async () => {
    await kpng.stop("SIGKILL");
    // the service IPs stay local (kpng's routes): nothing listens, so the node refuses
    expect(await r.topo.probe(r.topo.client.ns, { ip: ips.clusterIP, port: 80 })).toMatchObject({ ok: false, error: "refused" });
    await start();
    expect(await settledChecks(r.topo, checks(r.topo), LOADED_WAIT_MS, userspaceWants(r.topo))).toEqual(userspaceWants(r.topo));
  }, 150_000);

  test("--cleanup removes kpng's local routes", async () => {
    await kpng.stop("SIGKILL");
    const c = startKpng(["--cleanup", "--backend", "userspace"], { wrap: inNode(r.topo) });
    expect(await c.proc.exited).toBe(0);
    expect(await r.topo.exec(r.topo.node.ns, ["ip", "route", "show", "table", "local", "proto", "156"])).toBe("");
    expect(await r.topo.probe(r.topo.client.ns, { ip: ips.clusterIP, port: 80, timeout: 0.5 })).toMatchObject({
      ok: false,
      error: "timeout",
    });
  }, 90_000);

  test("--userspace-mode redirect: the same behaviour through nftables redirects, no routes", async () => {
    kpng = startKpng(["--input", r.input, "--node-name", NODE, "--backend", "userspace", "--userspace-mode", "redirect"], {
      wrap: inNode(r.topo),
    });
    await kpng.waitFor(/ INFO kpng: synced /);
    expect(await settledChecks(r.topo, checks(r.topo), LOADED_WAIT_MS, userspaceWants(r.topo))).toEqual(userspaceWants(r.topo));
    expect(await r.topo.exec(r.topo.node.ns, ["ip", "route", "show", "table", "local", "proto", "156"])).toBe("");
    await kpng.stop("SIGKILL");
    const c = startKpng(["--cleanup", "--backend", "userspace"], { wrap: inNode(r.topo) });
    expect(await c.proc.exited).toBe(0);
    expect(await r.topo.exec(r.topo.node.ns, ["nft", "list", "tables"])).not.toContain("kpng-userspace");
  }, 150_000);

  test("bad flag value: one line naming the flag, exit 2", async () => {
    const c = startKpng(["--input", r.input, "--backend", "userspace", "--userspace-mode", "tunnel"], { wrap: inNode(r.topo) });
    expect(await c.proc.exited).toBe(2);
    expect(c.stderr.join("\n")).toContain('flag --userspace-mode: "tunnel" must be bind or redirect');
  });
});

describe("sidecar: kpng serve + kpng backend --api unix://… --backend userspace", () => {
  let r: Rig;
  let brain: KpngProcess;
  let sidecar: KpngProcess;
  beforeAll(async () => {
    r = await rig("kpuc");
    const sock = `unix://${join(r.dir.path, "kpng.sock")}`;
    brain = startKpng(["serve", "--input", r.input, "--listen", sock], { wrap: inNode(r.topo) });
    await brain.waitFor(/serving the API/);
    // the localv1 wire carries no node IPs: the sidecar is told its own, as kube-proxy's --bind-address
    sidecar = startKpng(["backend", "--api", sock, "--node-name", NODE, "--node-ip", r.topo.node.v4, "--backend", "userspace"], {
      wrap: inNode(r.topo),
    });
    await sidecar.waitFor(/ synced .*backend=userspace/);
  }, 150_000);
  afterAll(async () => {
    await sidecar?.stop("SIGKILL");
    await brain?.stop("SIGKILL");
    await r?.topo.destroy();
    r?.dir.remove();
  });

  test("every service behaves for a client outside the node", async () => {
    expect(await settledChecks(r.topo, checks(r.topo), LOADED_WAIT_MS, userspaceWants(r.topo))).toEqual(userspaceWants(r.topo));
  }, 90_000);

  test("a change reaches the sidecar: a service removed from the file stops answering", async () => {
    r.write(
      r.objects.filter(
        (o) =>
          !(o.kind === "Service" && o.metadata.name === "cluster-ip") &&
          !(o.kind === "EndpointSlice" && o.metadata.name.startsWith("cluster-ip")),
      ),
    );
    const deadline = Date.now() + LOADED_WAIT_MS;
    let last = await r.topo.probe(r.topo.client.ns, { ip: ips.clusterIP, port: 80, timeout: 0.5 });
    while (last.ok && Date.now() < deadline) {
      await Bun.sleep(100);
      last = await r.topo.probe(r.topo.client.ns, { ip: ips.clusterIP, port: 80, timeout: 0.5 });
    }
    expect(last).toMatchObject({ ok: false, error: "timeout" });
    expect(await r.topo.probe(r.topo.client.ns, { ip: ips.affinity, port: 80 })).toMatchObject({ ok: true });
  }, 90_000);
});
