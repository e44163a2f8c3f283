// A full sync rewrites kpng's tables in place (plugins/nft/rewrite-in-place.ts), against
// the real kernel: whatever the tables hold — an older state's chains and
// sets, someone else's rules, chains and sets in kpng's chains and table,
// objects with another definition, a missing table — one full sync leaves
// exactly what a full sync into an empty namespace writes, in one
// transaction, and the affinity sets still wanted keep the clients that
// packets put there: a client stays on its endpoint across a restart.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { FIRST_LOAD_SPLIT_ELEMENTS } from "../../plugins/nft/executor.ts";
import { createNftBackend } from "../../plugins/nft/index.ts";
import type { Executor } from "../../src/host/backend.ts";
import type { Endpoint } from "../../src/core/brain/state.ts";
import { v4, v6 } from "../fixtures/addresses.ts";
import { createTopology, type Topology } from "../harness/netns.ts";
import { context, entry, ep, nodeConfig, nodeState, svc } from "./fixtures.ts";
import { canonicalRuleset } from "./ruleset.ts";

let topo: Topology;
let ref: Topology;
beforeAll(async () => {
  topo = await createTopology({ pods: 2, prefix: "kpip" });
  ref = await createTopology({ pods: 0, prefix: "kpir" });
  for (const p of topo.pods) await topo.serve(p, { tcp: [8080] });
});
afterAll(async () => {
  await topo?.destroy();
  await ref?.destroy();
});

const nft = (...argv: string[]) => topo.exec(topo.node.ns, ["nft", ...argv]);
const both = () => Object.fromEntries(topo.pods.map((p) => [p.name, ep({ ips: [p.v4, p.v6], ports: { http: 8080 } })]));
const sticky = (i: number, seconds: number) =>
  entry(
    svc({
      name: `sticky${i}`,
      clusterIPs: [v4.clusterIP(i), v6.clusterIP(i)],
      ports: [{ name: "http", port: 80 }],
      affinitySeconds: seconds,
    }),
    both(),
  );
const plain = (i: number, over = {}) =>
  entry(
    svc({ name: `plain${i}`, clusterIPs: [v4.clusterIP(i)], ports: [{ name: "http", port: 80, nodePort: 30000 + i }], ...over }),
    both(),
  );

/** the rules without the elements packets wrote to affinity sets, which a sync into an empty namespace cannot have */
const rules = async (t: Topology) =>
  (await canonicalRuleset(t, t.node.ns))
    .split("\n")
    .filter((l) => !/^elem ip6? aff-/.test(l))
    .join("\n");

/** `n` ClusterIP services of 10 endpoints each (not pods); the last one's endpoints are `last` when given */
const bigState = (n: number, last?: Record<string, Endpoint>) =>
  nodeState(
    Array.from({ length: n }, (_, i) =>
      entry(
        svc({ name: `big${i}`, clusterIPs: [v4.clusterIP(i)], ports: [{ name: "http", port: 80 }] }),
        i === n - 1 && last
          ? last
          : Object.fromEntries(
              Array.from({ length: 10 }, (_, k) => [`p${i}-${k}`, ep({ ips: [v4.pod(i % 250, k + 1)], ports: { http: 8080 } })]),
            ),
      ),
    ),
  );

/** elements added by a printed transaction */
const addedElements = (tx: string) => tx.split("\n").reduce((n, l) => n + (l.startsWith("add element ") ? l.split(", ").length : 0), 0);

/** which pod each of `n` connections from the client to `ip`:80 reached */
async function answers(ip: string, n = 6): Promise<string[]> {
  const rs = await topo.probeMany(
    topo.client.ns,
    Array.from({ length: n }, () => ({ ip, port: 80 })),
  );
  return rs.map((r) => (r.ok ? r.who : r.error));
}

/** an executor that records the nft transactions it runs */
function recording(t: Topology) {
  const txs: string[] = [];
  const real = t.executor(t.node.ns);
  const exec: Executor = {
    run: (argv, stdin) => {
      if (argv[0] === "nft" && argv.includes("-f")) txs.push(stdin ?? "");
      return real.run(argv, stdin);
    },
  };
  return { exec, txs };
}

describe("nft full sync in place (real kernel)", () => {
  test("over stale, foreign and changed objects: exactly what a full sync into an empty namespace writes; affinity kept where still wanted", async () => {
    // an earlier kpng: two sticky services (sticky2 to change its timeout), one to be deleted, one plain
    const before = nodeState([sticky(1, 600), sticky(2, 600), sticky(3, 600), plain(4)]);
    const first = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    await first.apply(before, null);
    // clients pinned by packets (the affinity sets fill), sticky1 over both families
    const pinned = { v4: (await answers(v4.clusterIP(1), 1))[0], v6: (await answers(v6.clusterIP(1), 1))[0] };
    expect([pinned.v4, pinned.v6].every((p) => p.startsWith("pod"))).toBe(true);
    await answers(v4.clusterIP(2), 1);
    await answers(v4.clusterIP(3), 1);
    await first.close();

    // kpng not running: other processes edit its tables
    await nft("insert", "rule", "ip", "kpng", "services", "ip", "daddr", v4.clusterIP(4), "drop");
    await nft("add", "chain", "ip", "kpng", "foreign-chain");
    await nft("add", "rule", "ip", "kpng", "foreign-chain", "counter");
    await nft("add", "rule", "ip", "kpng", "nat-output", "jump", "foreign-chain");
    await nft("add", "set", "ip", "kpng", "foreign-set", "{ type ipv4_addr; }");
    await nft("add", "element", "ip", "kpng", "cluster-ips", `{ ${v4.clusterIP(99)} }`);
    // another definition under a name kpng wants: a base chain's priority and policy, a set's key type
    await nft("delete", "chain", "ip", "kpng", "filter-output");
    await nft("add", "chain", "ip", "kpng", "filter-output", "{ type filter hook output priority 0; policy drop; }");
    await nft("add", "chain", "ip", "kpng", "filter-input", "{ type filter hook input priority -110; policy drop; }");
    await topo.exec(
      topo.node.ns,
      ["nft", "-f", "-"],
      "flush chain ip kpng masquerading\ndelete set ip kpng hairpin\nadd set ip kpng hairpin { type ipv4_addr . inet_service; }\n",
    );

    // kpng again: sticky3 deleted, sticky2's timeout changed, plain4 now with affinity (new sets)
    const after = nodeState([sticky(1, 600), sticky(2, 900), plain(4, { affinitySeconds: 60 })]);
    const { exec, txs } = recording(topo);
    const restarted = createNftBackend(context(nodeConfig()), { exec });
    await restarted.apply(after, null);
    expect(txs).toHaveLength(1);
    expect(txs[0]).not.toContain("delete table");

    // the reference: tables re-created whole (its listing fails) in an empty namespace
    const refExec: Executor = {
      run: (argv, stdin) => (argv.includes("list") ? Promise.reject(new Error("no listing")) : ref.executor(ref.node.ns).run(argv, stdin)),
    };
    const refCtx = context(nodeConfig());
    const reference = createNftBackend(refCtx, { exec: refExec });
    await reference.apply(after, null);
    expect(refCtx.lines.some((l) => l.includes("cannot list kpng's tables"))).toBe(true);
    expect(await rules(topo)).toBe(await rules(ref));

    // affinity: sticky1's sets kept their clients; sticky2's (new timeout) and sticky3's are gone or empty
    const affElems = (await canonicalRuleset(topo, topo.node.ns)).split("\n").filter((l) => /^elem ip6? aff-/.test(l));
    expect(affElems.filter((l) => l.includes(`"${topo.client.v4}"`)).length).toBe(1);
    expect(affElems.filter((l) => l.includes(`"${topo.client.v6}"`)).length).toBe(1);
    expect(await answers(v4.clusterIP(1))).toEqual(Array(6).fill(pinned.v4));
    expect(await answers(v6.clusterIP(1))).toEqual(Array(6).fill(pinned.v6));
    await restarted.close();

    // one table gone altogether: created again, the other family's affinity kept
    await nft("delete", "table", "ip6", "kpng");
    const again = createNftBackend(context(nodeConfig()), { exec: topo.executor(topo.node.ns) });
    await again.apply(after, null);
    expect(await rules(topo)).toBe(await rules(ref));
    expect(await answers(v4.clusterIP(1))).toEqual(Array(6).fill(pinned.v4));
    await again.close();
  }, 30_000);

  test("no tables at all: the first full sync in place creates them, in one transaction", async () => {
    await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]);
    const { exec, txs } = recording(topo);
    const backend = createNftBackend(context(nodeConfig()), { exec });
    const state = nodeState([sticky(1, 600), plain(4)]);
    await backend.apply(state, null);
    expect(txs.map((t) => t.split("\n")[0])).toEqual(['add table ip kpng { comment "rules for kpng, the Kubernetes service proxy"; }']);
    expect(txs[0]).not.toContain("delete");
    const reference = createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns) });
    await reference.apply(state, null);
    expect(await rules(topo)).toBe(await rules(ref));
    await backend.close();
  });

  test("no tables and a big state: the elements load in batches side by side after the rest; the same rules as one transaction; tables in place are rewritten in one", async () => {
    // 2,000 services x 10 endpoints: over 20,000 elements; the last one's endpoints are the pods
    const big = bigState(2000, both());
    await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]);
    await ref.exec(ref.node.ns, ["nft", "flush", "ruleset"]);
    const { exec, txs } = recording(topo);
    const backend = createNftBackend(context(nodeConfig()), { exec });
    await backend.apply(big, null);
    const [skeleton, ...batches] = txs;
    expect(batches.length).toBeGreaterThanOrEqual(2);
    expect(skeleton).not.toContain("add element");
    for (const b of batches)
      expect(
        b
          .trim()
          .split("\n")
          .every((l) => l.startsWith("add element ")),
      ).toBe(true);
    expect(batches.reduce((n, b) => n + addedElements(b), 0)).toBeGreaterThanOrEqual(FIRST_LOAD_SPLIT_ELEMENTS);

    // the reference: the same state in one transaction (its listing fails: no split)
    const refRec = recording(ref);
    const refExec: Executor = {
      run: (argv, stdin) => (argv.includes("list") ? Promise.reject(new Error("no listing")) : refRec.exec.run(argv, stdin)),
    };
    await createNftBackend(context(nodeConfig()), { exec: refExec }).apply(big, null);
    expect(refRec.txs).toHaveLength(1);
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
    expect((await answers(v4.clusterIP(1999))).every((who) => who.startsWith("pod"))).toBe(true);
    await backend.close();

    // a restart over the loaded tables: one transaction
    const again = recording(topo);
    await createNftBackend(context(nodeConfig()), { exec: again.exec }).apply(big, null);
    expect(again.txs).toHaveLength(1);
    expect(again.txs[0]).toContain("add element ");
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
  }, 60_000);

  test("a batch of the first load refused: the apply fails once the other batches are in, and the next full sync, one transaction, leaves the same rules as a load without failure", async () => {
    const big = bigState(2100);
    await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]);
    const { exec, txs } = recording(topo);
    let sent = 0;
    // the first batch (after the skeleton) is refused without reaching nft; the others run
    const failing: Executor = {
      run: (argv, stdin) => (argv.includes("-f") && ++sent === 2 ? Promise.reject(new Error("refused")) : exec.run(argv, stdin)),
    };
    const backend = createNftBackend(context(nodeConfig()), { exec: failing });
    await expect(backend.apply(big, null)).rejects.toThrow("refused");
    expect(txs.length).toBeGreaterThanOrEqual(2);
    // every batch but the refused one is in the kernel when the failure is reported
    const inKernel = (await canonicalRuleset(topo, topo.node.ns)).split("\n").filter((l) => l.startsWith("elem ")).length;
    expect(inKernel).toBe(txs.reduce((n, t) => n + addedElements(t), 0));

    const before = txs.length;
    await backend.apply(big, null);
    expect(txs.length - before).toBe(1);
    await ref.exec(ref.node.ns, ["nft", "flush", "ruleset"]);
    await createNftBackend(context(nodeConfig()), { exec: ref.executor(ref.node.ns) }).apply(big, null);
    expect(await canonicalRuleset(topo, topo.node.ns)).toBe(await canonicalRuleset(ref, ref.node.ns));
  }, 60_000);
});
