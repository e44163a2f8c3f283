// `kpng serve` answers /globalv1.Sets/Watch beside localv1 on the same
// listener: read by buf curl with the repo's proto/ as schema (an
// independent gRPC client), and followed by node agents (`kpng --api`)
// whose output equals the full binary's on the same cluster.

import { fromBinary } from "@bufbuild/protobuf";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync } from "node:fs";
import { join } from "node:path";
import { EndpointInfoSchema, NodeInfoSchema, ServiceInfoSchema } from "../../src/gen/globalv1/global_pb.ts";
import { bufCurl } from "../harness/buf-curl.ts";
import { nftDryRun, ROOT, startKpng, startServe, tempDir, type KpngProcess } from "../harness/kpng-process.ts";

const dir = tempDir("kpng-global-");
const input = join(dir.path, "cluster.yaml");
const sock = join(dir.path, "brain.sock");
let serve: KpngProcess;

beforeAll(async () => {
  dir.create();
  copyFileSync(join(ROOT, "examples/cluster.yaml"), input);
  serve = await startServe(["--input", input, "--node-name", "node-1", "--listen", `unix://${sock}`]);
});
afterAll(async () => {
  await serve?.stop();
  dir.remove();
});

async function run(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = startKpng(args);
  const code = await p.proc.exited;
  await Bun.sleep(20); // let the pumps drain
  return { code, out: p.stdout.join("\n"), err: p.stderr.join("\n") };
}

describe("buf curl, gRPC over h2c on the unix socket", () => {
  test("GlobalWatch: Reset, node sets, service sets, endpoint sets, Sync; kpng's paths and messages", async () => {
    const { err, code, messages } = await bufCurl("http://localhost/globalv1.Sets/Watch", "{}", ["--unix-socket", sock]);
    expect(err).toBe("");
    expect(code).toBe(0);
    expect(messages[0]).toEqual({ Reset: {} });
    expect(messages.at(-1)).toEqual({ Sync: {} });
    const sets = messages.slice(1, -1).map((m) => m.Set);
    expect(sets.every((s) => s)).toBe(true);
    const order = sets.map((s) => s.Ref.Set);
    // kpng's order: node, service, endpoint sets
    expect(order).toEqual(
      [...order].sort(
        (a, b) =>
          ["GlobalNodeInfos", "GlobalServiceInfos", "GlobalEndpointInfos"].indexOf(a) -
          ["GlobalNodeInfos", "GlobalServiceInfos", "GlobalEndpointInfos"].indexOf(b),
      ),
    );
    const bytes = (s: any) => Buffer.from(s.Bytes, "base64");
    const nodes = sets.filter((s) => s.Ref.Set === "GlobalNodeInfos");
    expect(nodes.map((s) => s.Ref.Path).sort()).toEqual(["|node-1||", "|node-2||", "|node-3||"]);
    const n1 = fromBinary(NodeInfoSchema, bytes(nodes.find((s) => s.Ref.Path === "|node-1||")));
    expect(n1.Hash).not.toBe(0n);
    expect(n1.Node?.Name).toBe("node-1");
    expect(n1.Node?.Topology?.Zone).toBe(n1.Node?.Labels["topology.kubernetes.io/zone"]);
    expect(n1.Node?.Addresses.length).toBeGreaterThan(0);
    const svcs = sets.filter((s) => s.Ref.Set === "GlobalServiceInfos");
    for (const s of svcs) {
      const info = fromBinary(ServiceInfoSchema, bytes(s));
      expect(s.Ref.Path).toBe(`${info.Service!.Namespace}|${info.Service!.Name}||`);
    }
    const eps = sets.filter((s) => s.Ref.Set === "GlobalEndpointInfos");
    expect(eps.length).toBeGreaterThan(svcs.length);
    for (const s of eps) {
      const info = fromBinary(EndpointInfoSchema, bytes(s));
      const ip = [...info.Endpoint!.IPs!.V4, ...info.Endpoint!.IPs!.V6][0];
      expect(s.Ref.Path).toBe(`${info.Namespace}|${info.ServiceName}|${info.SourceName}|${ip}`);
      expect(info.Conditions).toBeDefined();
      expect(svcs.some((v) => v.Ref.Path === `${info.Namespace}|${info.ServiceName}||`)).toBe(true);
    }
    // conditions, topology and hints are carried (the example has a terminating endpoint and zone hints)
    const infos = eps.map((s) => fromBinary(EndpointInfoSchema, bytes(s)));
    expect(infos.some((i) => i.Conditions!.Terminating)).toBe(true);
    expect(infos.some((i) => i.Hints && i.Hints.Zones.length > 0)).toBe(true);
    expect(infos.every((i) => i.Topology?.Node)).toBe(true);
  });

  test("localv1 still answers on the same socket", async () => {
    const { code, out } = await bufCurl("http://localhost/localv1.Sets/Watch", '{"NodeName":"node-1"}', ["--unix-socket", sock]);
    expect(code).toBe(0);
    expect(out).toContain('"ServicesSet"');
  });
});

describe("node agent (kpng --api) = full binary on the same cluster", () => {
  for (const node of ["node-1", "node-2", "node-3"]) {
    test(`kpng local -o json, ${node}`, async () => {
      const [agent, full] = await Promise.all([
        run(["local", "--api", `unix://${sock}`, "--node-name", node]),
        run(["local", "--input", input, "--node-name", node]),
      ]);
      expect(agent.code).toBe(0);
      expect(JSON.parse(agent.out).services.length).toBeGreaterThan(0);
      expect(agent.out).toBe(full.out);
    });
  }

  test("nft dry-run, the first --api unreachable: the agent fails over and prints the same transaction", async () => {
    const [agent, full] = await Promise.all([
      run([
        "--api",
        `unix://${join(dir.path, "gone.sock")}`,
        "--api",
        `unix://${sock}`,
        "--node-name",
        "node-2",
        "--backend",
        "nft",
        "--dry-run",
        "--once",
      ]),
      run(["--input", input, "--node-name", "node-2", "--backend", "nft", "--dry-run", "--once"]),
    ]);
    expect(agent.code).toBe(0);
    expect(agent.err).toMatch(/global stream failed, trying the next brain/);
    expect(agent.out).toContain("add table");
    expect(agent.out).toBe(full.out);
  });

  test("a sidecar on the agent's own --listen socket gets the node's state, as from the brain", async () => {
    const agentSock = join(dir.path, "agent.sock");
    const agent = startKpng(["--api", `unix://${sock}`, "--listen", `unix://${agentSock}`, ...nftDryRun("node-3")]);
    try {
      await agent.waitFor(/synced backend=nft/);
      const next = async (socket: string) => {
        const { code, messages } = await bufCurl("http://localhost/localv1.Endpoints/Next", '{"NodeName":"node-3"}', [
          "--unix-socket",
          socket,
        ]);
        expect(code).toBe(0);
        return messages
          .filter((i) => i.Endpoints)
          .map((i) => JSON.stringify(i.Endpoints))
          .sort();
      };
      const [fromAgent, fromBrain] = await Promise.all([next(agentSock), next(sock)]);
      expect(fromAgent.length).toBeGreaterThan(0);
      expect(fromAgent).toEqual(fromBrain);
    } finally {
      await agent.stop();
    }
  });

  test("--api with --input: exit 2, one line naming the flag", async () => {
    const r = await run(["local", "--api", `unix://${sock}`, "--input", input]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("flag --api: cannot be combined with --input");
  });
});
