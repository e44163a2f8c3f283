// `kpng --backend ebpf` as deployed: the real process with the flags an
// operator passes (--input, --node-name, --backend ebpf, --ebpf-cgroup and
// --ebpf-pin-dir pointing at the test's own cgroup and bpffs), run inside the
// node network namespace. Processes on the node (in the cgroup) are balanced
// at connect(); clients outside the node go through the composed nft rules,
// with the same checks the nft deployment passes. Then the faults: kill -9
// and restart under a continuous probe, --cleanup, a bad --ebpf-cgroup.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { compiledKpng } from "../fixtures/compiled.ts";
import { asList, checks, clusterObjects, deniedClient, ips, NODE, nodePorts, podPorts, runChecks, wanted } from "../deployed/cluster.ts";
import { createTopology, type Probe, type Topology } from "../harness/netns.ts";
import { createSandbox, type Sandbox } from "./sandbox.ts";

let topo: Topology;
let sb: Sandbox;
let kpng: KpngProcess | undefined;
const dir = tempDir("kpng-ebpf-deployed-");
let args: string[];

const start = async (bin?: string) => {
  kpng = startKpng(args, { bin, wrap: ["ip", "netns", "exec", topo.node.ns] });
  await kpng.waitFor(/ INFO kpng: synced /);
  return kpng;
};

beforeAll(async () => {
  topo = await createTopology({ pods: 3, prefix: "kped" });
  sb = await createSandbox();
  dir.create();
  for (const p of topo.pods) await topo.serve(p, podPorts);
  await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
  const input = join(dir.path, "cluster.json");
  writeFileSync(input, JSON.stringify(asList(clusterObjects(topo))));
  args = ["--input", input, "--node-name", NODE, "--backend", "ebpf", "--ebpf-cgroup", sb.cgroup, "--ebpf-pin-dir", sb.pinDir];
  await start();
}, 60_000);
afterAll(async () => {
  await kpng?.stop("SIGKILL");
  await sb?.destroy();
  await topo?.destroy();
  dir.remove();
});

const tcp = (ip: string, port = 80, timeout = 2): Probe => ({ ip, port, proto: "tcp", timeout });
const verdicts = async (probes: Probe[]) => (await sb.probeMany(topo.node.ns, probes)).map((r) => (r.ok ? r.who : r.error));

describe("kpng --backend ebpf, as deployed", () => {
  test("clients outside the node: every check the nft deployment passes (the composed nft rules)", async () => {
    const list = checks(topo);
    expect(await runChecks(topo, list)).toEqual(wanted(list));
  });

  test("processes on the node: balanced at connect(), kube-proxy's answers", async () => {
    const got = await verdicts([
      tcp(ips.clusterIP),
      tcp(topo.node.v4, nodePorts.tcp),
      // eTP=Local, no local endpoint: traffic from the node short-circuits to the cluster endpoints, as kube-proxy's does
      tcp(topo.node.v4, nodePorts.localNo),
      tcp(ips.empty),
    ]);
    expect(got[0]).toMatch(/^pod[01]$/);
    expect(got.slice(1)).toEqual(["pod0", "pod2", "refused"]);
    // the connections went to the pods themselves: no NAT, so no conntrack entry names the service address
    // (clients outside the node, DNATed by nft, do leave one: their source is theirs, not the node's)
    const flows = await topo.exec(topo.node.ns, ["conntrack", "-L", "-s", topo.node.v4, "-d", ips.clusterIP]);
    expect(flows).not.toContain(ips.clusterIP);
    expect(await topo.exec(topo.node.ns, ["conntrack", "-L", "-d", ips.clusterIP])).toContain(`src=${topo.client.v4} dst=${ips.clusterIP}`);
  });

  test("kill -9 and restart as the compiled binary (its embedded object): no connection from the node fails, the programs are not loaded again", async () => {
    const bin = await compiledKpng();
    const loop = await sb.probeLoop(topo.node.ns, [tcp(ips.clusterIP), tcp(ips.affinity)]);
    await kpng!.stop("SIGKILL");
    await Bun.sleep(200);
    const again = await start(bin);
    await Bun.sleep(200);
    const run = await loop.stop();
    expect({ failed: run.failed, failures: run.failures }).toEqual({ failed: 0, failures: [] });
    expect(run.connections).toBeGreaterThan(10);
    expect(again.stderr.some((l) => l.includes("programs already attached"))).toBe(true);
  }, 120_000);

  test("--cleanup: links and maps unpinned (the hooks detach), kpng's nft tables gone", async () => {
    await kpng!.stop("SIGKILL");
    const c = startKpng([...args, "--cleanup"], { wrap: ["ip", "netns", "exec", topo.node.ns] });
    expect(await c.proc.exited).toBe(0);
    expect(existsSync(sb.pinDir)).toBe(false);
    expect(await topo.exec(topo.node.ns, ["nft", "list", "tables"])).not.toContain("kpng");
    expect(await verdicts([tcp(ips.empty, 80, 0.5)])).toEqual(["timeout"]);
  }, 90_000);

  test("a --ebpf-cgroup that is no cgroup v2 directory: one line naming it, exit 1", async () => {
    const p = startKpng(
      [
        "--input",
        join(dir.path, "cluster.json"),
        "--node-name",
        NODE,
        "--backend",
        "ebpf",
        "--ebpf-cgroup",
        dir.path,
        "--ebpf-pin-dir",
        sb.pinDir,
      ],
      {
        wrap: ["ip", "netns", "exec", topo.node.ns],
      },
    );
    expect(await p.proc.exited).toBe(1);
    // besides the usual start-up log lines, one error line
    const lines = p.stderr.filter((l) => l.startsWith("kpng: "));
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(`--ebpf-cgroup ${dir.path}: not a cgroup v2 directory`);
  }, 90_000);
});
