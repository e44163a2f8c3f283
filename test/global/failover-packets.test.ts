// A brain killed under a node agent, with real packets: the agent (real
// process, nft, in a node network namespace) follows two brains; brain A is
// killed -9 while a client outside the node keeps opening connections
// through it. The agent moves to brain B, finds the same model (a diff of
// nothing), and no connection fails; the kernel's rules stay byte for byte.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { loadedBound } from "../harness/load.ts";
import { asList, checks, clusterObjects, NODE, nodePorts, podPorts, deniedClient, runChecks, wanted, ips } from "../deployed/cluster.ts";
import { continuousProbe, rulesOf } from "../deployed/rig.ts";
import { createTopology, type Topology } from "../harness/netns.ts";

const dir = tempDir("kpng-global-pkt-");
const sockA = join(dir.path, "a.sock");
const sockB = join(dir.path, "b.sock");
let topo: Topology;
let brainA: KpngProcess;
let brainB: KpngProcess;
let agent: KpngProcess;

beforeAll(async () => {
  dir.create();
  topo = await createTopology({ pods: 3, prefix: "kpgf" });
  for (const p of topo.pods) await topo.serve(p, podPorts);
  await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
  const input = join(dir.path, "cluster.json");
  writeFileSync(input, JSON.stringify(asList(clusterObjects(topo))));
  brainA = await startServe(["--input", input, "--listen", `unix://${sockA}`]);
  brainB = await startServe(["--input", input, "--listen", `unix://${sockB}`]);
  agent = startKpng(["--api", `unix://${sockA}`, "--api", `unix://${sockB}`, "--node-name", NODE, "--backend", "nft"], {
    wrap: ["ip", "netns", "exec", topo.node.ns],
  });
  await agent.waitFor(/ INFO kpng: synced /);
  // three loaded waits: the two brains, the agent's first sync
}, 210_000);
afterAll(async () => {
  for (const p of [agent, brainA, brainB]) await p?.stop("SIGKILL");
  await topo?.destroy();
  dir.remove();
});

const syncs = () => agent.stderr.filter((l) => / INFO kpng: synced /.test(l)).length;

describe("node agent, nft, real packets", () => {
  test("every service behaves for a client outside the node, as with the full binary", async () => {
    const list = checks(topo);
    expect(await runChecks(topo, list)).toEqual(wanted(list));
  });

  test("brain killed -9 under the agent: it follows the other within 2 s, no connection fails, rules untouched", async () => {
    const before = await rulesOf(topo, "nft");
    const synced = syncs();
    const probe = await continuousProbe(topo, [
      { ip: ips.clusterIP, port: 80 },
      { ip: topo.node.v4, port: nodePorts.tcp },
    ]);
    const killed = performance.now();
    await brainA.stop("SIGKILL");
    await agent.waitFor(new RegExp(`following brain api=unix://${sockB.replaceAll(".", "\\.")} resync=true changed=0 `));
    const followedMs = performance.now() - killed;
    console.log(`agent followed brain B ${followedMs.toFixed(0)} ms after brain A was killed`);
    // the 2 s kpng promises, stretched by the load (as test/global/faults.test.ts checks it)
    expect(followedMs).toBeLessThan(loadedBound(2000));
    await Bun.sleep(1000);
    const run = await probe.stop();
    expect(run.failures).toEqual([]);
    expect(run.connections).toBeGreaterThan(10);
    expect(syncs()).toBe(synced);
    expect(await rulesOf(topo, "nft")).toBe(before);
  }, 90_000);
});
