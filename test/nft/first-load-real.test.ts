// A first load into empty tables sends its elements on kpng's own netlink
// socket (plugins/nft/netlink-batch.ts, executor.ts), and, when kpng's
// tables do not exist, its base ahead of the services: against the real
// kernel, in namespaces, it must leave exactly what `nft -f` of the same plan
// leaves, packets must flow through it, a restart over the tables rewrites
// them in one transaction, and a batch the kernel refuses must fail the
// apply naming the element, with nothing of its round committed.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { NftRunner } from "../../plugins/nft/executor.ts";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { openBatchSocket } from "../../plugins/nft/netlink-socket.ts";
import { Transaction } from "../../plugins/nft/transaction.ts";
import type { Executor } from "../../src/host/backend.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { canonical6, createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, nodeConfig, nodeState, svc } from "./fixtures.ts";
import { bigService, type Families, shapes } from "./netlink-batch-cases.ts";
import { check, podEndpoints } from "./packet-cases.ts";
import { canonicalRuleset } from "./ruleset.ts";

let topo: Topology;
let ref: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 2, prefix: "kpfl" });
  ref = await createTopology({ pods: 0, prefix: "kpfr" });
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080], udp: [5353] });
});
afterAll(async () => {
  await topo?.destroy();
  await ref?.destroy();
});

/** an executor that keeps every `nft -f` script it ran (not conntrack's `-f`), and every command */
function recording(exec: Executor) {
  const scripts: string[] = [];
  const commands: string[][] = [];
  const rec: Executor = {
    run: (argv, stdin) => {
      commands.push(argv);
      if (argv[0] === "nft" && argv.includes("-f")) scripts.push(stdin ?? "");
      return exec.run(argv, stdin);
    },
  };
  return { exec: rec, scripts, commands };
}

/** removes kpng's tables, so that the next full sync is a first load */
const empty = (t: Topology) =>
  t.exec(t.node.ns, ["nft", "-f", "-"], "table ip kpng\ndelete table ip kpng\ntable ip6 kpng\ndelete table ip6 kpng\n");

const states: { name: string; families: Families }[] = [
  { name: "IPv4", families: ["v4"] },
  { name: "IPv6", families: ["v6"] },
  { name: "dual-stack", families: ["v4", "v6"] },
];

describe("nft first load through kpng's netlink socket (real kernel)", () => {
  test.each(states.map((s) => [s.name, s] as const))("%s: the same ruleset as nft -f of the same plan", async (_, s) => {
    const state = nodeState([...shapes(s.families).map((x) => x.entry), ...(s.families.includes("v6") ? [bigService()] : [])]);
    await Promise.all([empty(topo), empty(ref)]);
    const viaNetlink = recording(topo.executor(topo.node.ns));
    const a = createNftBackend(context(nodeConfig()), { exec: viaNetlink.exec, netns: topo.node.ns });
    const b = createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns), netns: ref.node.ns, firstLoad: "nft" });
    await Promise.all([a.apply(state, null), b.apply(state, null)]);
    // the elements did not go through nft: only the interval set's (nodeport-ips) are in its scripts
    const elementLines = viaNetlink.scripts
      .join("")
      .split("\n")
      .filter((l) => l.startsWith("add element"));
    expect(elementLines.map((l) => l.split(" ").slice(0, 5).join(" ")).filter((l) => !l.endsWith("nodeport-ips"))).toEqual([]);
    const [got, want] = await Promise.all([canonicalRuleset(topo, topo.node.ns), canonicalRuleset(ref, ref.node.ns)]);
    expect(got.split("\n").filter((l) => l.startsWith("elem")).length).toBeGreaterThan(50);
    expect(got).toBe(want);
    await Promise.all([a.close(), b.close()]);
  });

  test("no table: the base loads ahead of the services, unlisted; a restart over the tables lists them and rewrites them in one transaction", async () => {
    const state = nodeState([...shapes(["v4", "v6"]).map((x) => x.entry), bigService()]);
    await Promise.all([empty(topo), empty(ref)]);
    const first = recording(topo.executor(topo.node.ns));
    const a = createNftBackend(context(nodeConfig()), { exec: first.exec, netns: topo.node.ns });
    const b = createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns), netns: ref.node.ns, firstLoad: "nft" });
    await Promise.all([a.apply(state, null), b.apply(state, null)]);
    // kpng's socket said no table exists: nothing listed; the base (both tables) first, then the services' objects
    expect(first.commands.filter((c) => c.includes("list"))).toEqual([]);
    const [base, rest] = first.scripts;
    expect(base.match(/^create table .*/gm)?.map((l) => l.split(" ").slice(0, 4).join(" "))).toEqual([
      "create table ip kpng",
      "create table ip6 kpng",
    ]);
    expect(base).not.toContain("dispatch-");
    expect(rest).not.toMatch(/^(add|create) table/m);
    expect(rest).toContain("add chain ip6 kpng dispatch-");
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
    await a.close();

    const again = recording(topo.executor(topo.node.ns));
    const restarted = createNftBackend(context(nodeConfig()), { exec: again.exec, netns: topo.node.ns });
    await restarted.apply(state, null);
    expect(again.commands.filter((c) => c.includes("list")).length).toBeGreaterThan(0);
    // in place, everything at once: no moment without rules (then the watch's proofs, stamps only)
    const txs = again.scripts.filter(
      (t) =>
        !t
          .trim()
          .split("\n")
          .every((l) => l.includes(" sync-stamp")),
    );
    expect(txs).toHaveLength(1);
    expect(txs[0]).toStartWith("add table ip kpng");
    expect(txs[0]).toContain("add element ip6 kpng service-ips");
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
    await Promise.all([restarted.close(), b.close()]);
  });

  test("a table that appears between kpng's question and the base: the base is refused whole, nothing is written twice, the next full sync leaves the same rules", async () => {
    const state = nodeState(shapes(["v4", "v6"]).map((x) => x.entry));
    await Promise.all([empty(topo), empty(ref)]);
    const real = topo.executor(topo.node.ns);
    const intruding: Executor = {
      run: async (argv, stdin) => {
        if (stdin?.startsWith("create table")) await real.run(["nft", "-f", "-"], "add table ip kpng\nadd chain ip kpng theirs\n");
        return real.run(argv, stdin);
      },
    };
    const a = createNftBackend(context(nodeConfig()), { exec: intruding, netns: topo.node.ns });
    await expect(a.apply(state, null)).rejects.toThrow("File exists");
    // the base was refused whole: the other process's table as it made it, no IPv6 table
    expect(await topo.exec(topo.node.ns, ["nft", "list", "ruleset"])).toMatch(/^table ip kpng \{\n\tchain theirs \{\n\t\}\n\}\n$/);
    await a.apply(state, null);
    await createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns), netns: ref.node.ns }).apply(state, null);
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
    await a.close();
  });

  test("packets flow through what the batch loaded", async () => {
    await empty(topo);
    const cip = { v4: v4.clusterIP(40), v6: v6.clusterIP(40) };
    const lb = { v4: v4.external(40), v6: v6.external(40) };
    const web = svc({
      name: "web",
      clusterIPs: [cip.v4, cip.v6],
      lbIPs: [lb.v4, lb.v6],
      ports: [
        { name: "http", port: 80, nodePort: 30080 },
        { name: "dns", protocol: "UDP", port: 53 },
      ],
    });
    const sticky = svc({ name: "sticky", clusterIPs: [v4.clusterIP(41)], affinitySeconds: 60, ports: [{ name: "http", port: 80 }] });
    const eps = podEndpoints(topo, [0, 1], { http: 8080, dns: 5353 });
    const backend = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns), netns: topo.node.ns });
    await backend.apply(nodeState([entry(web, eps), entry(sticky, podEndpoints(topo, [1], { http: 8080 }))]), null);
    const pods = ["pod0", "pod1"];
    await check(topo, [
      ...(["v4", "v6"] as const).flatMap((f) => [
        { from: "client" as const, to: cip[f], port: 80, answer: pods },
        { from: "client" as const, to: cip[f], port: 53, proto: "udp" as const, answer: pods },
        { from: "client" as const, to: lb[f], port: 80, answer: pods },
      ]),
      { from: "client", to: v4.node(0), port: 30080, answer: pods },
      { from: "client", to: canonical6(v6.node(0)), port: 30080, answer: pods },
      { from: "client", to: v4.clusterIP(41), port: 80, answer: "pod1" },
      // a pod's own source kept (no hairpin: the only endpoint is another pod)
      { from: "pod0", to: v4.clusterIP(41), port: 80, answer: "pod1", source: "self" },
    ]);
    await backend.close();
  });

  test("a batch the kernel refuses fails the apply, names the element, and commits nothing of its round", async () => {
    await empty(topo);
    const log = memoryLogger();
    const runner = new NftRunner(topo.executor(topo.node.ns), undefined, log, undefined, () => openBatchSocket(topo.node.ns));
    const tx = new Transaction()
      .add({ kind: "table", verb: "add", family: "ip" })
      .add({ kind: "chain", verb: "add", family: "ip", chain: { name: "there" } })
      .add({ kind: "map", verb: "add", family: "ip", set: { name: "m", type: "ipv4_addr : verdict" } })
      .add({
        kind: "elements",
        verb: "add",
        family: "ip",
        set: "m",
        items: [
          ...Array.from({ length: 3000 }, (_, i) => ({ key: `198.18.${i >> 8}.${i & 255}`, value: "goto there" })),
          { key: "198.18.100.1", value: "goto nowhere" },
        ],
      });
    const err = await runner.apply(tx, { full: true, fresh: true }).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(String(err)).toContain("add element ip kpng m { 198.18.100.1 : goto nowhere }: No such file or directory");
    // the skeleton went in through nft -f; of the elements, the rounds before the refused one (fillRounds:
    // 256 + 256 + 512 + 1024), nothing of the round holding it (2048 to 3000)
    const listed = await topo.exec(topo.node.ns, ["nft", "list", "map", "ip", "kpng", "m"]);
    const keys = listed.match(/198\.18\.\d+\.\d+/g) ?? [];
    expect(keys.length).toBe(2048);
    expect(keys).toContain("198.18.7.255");
    expect(keys).not.toContain("198.18.8.0");
    // the refusal may be the encoder's fault: said once, and later first loads go through nft
    expect(log.lines.filter((l) => l.includes("netlink"))).toHaveLength(1);
    expect(runner.encodesFirstLoads).toBe(false);
  });
});
