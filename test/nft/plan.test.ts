// Partial sync without a kernel (dry-run and recorders): what one change
// costs at 10 and 2,000 services, failure handling, element ownership,
// deterministic dry-run output.

import { afterAll, describe, expect, test } from "bun:test";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { NftRunner } from "../../plugins/nft/executor.ts";
import { NftSync } from "../../plugins/nft/plan.ts";
import { Transaction } from "../../plugins/nft/transaction.ts";
import type { NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";
import { v4 } from "../fixtures/addresses.ts";
import { context, entry, ep, isTransaction, nextState, nodeConfig, nodeState, recorder, svc } from "./fixtures.ts";

const ip4 = (x: number, first: number) => `${first}.${(x >> 16) & 255}.${(x >> 8) & 255}.${x & 255}`;
const epAt = (x: number) => ep({ ips: [ip4(x, 11)], local: false, ports: { http: 8080 } });

/** service i: one cluster IP (v4), one TCP port, `n` remote endpoints */
function service(i: number, endpoints: number[]): ServiceEndpoints {
  const s = svc({ namespace: `ns${i % 100}`, name: `svc${i}`, clusterIPs: [ip4(i, 10)], ports: [{ name: "http", port: 80 }] });
  return entry(s, Object.fromEntries(endpoints.map((x) => [`p${x}`, epAt(x)])));
}
const tenEndpoints = (i: number) => Array.from({ length: 10 }, (_, j) => i * 10 + j);

const clusters = new Map<number, NodeState>();
// bun runs every file in one process: 2,000 services kept past this file would slow every
// later collection (a full one after a big sync in watch.test.ts took 0.4 s of CPU)
afterAll(() => clusters.clear());
/** n services of 10 endpoints (built once per size: states are immutable) */
function cluster(n: number): NodeState {
  let s = clusters.get(n);
  if (!s) clusters.set(n, (s = nodeState(Array.from({ length: n }, (_, i) => service(i, tenEndpoints(i))))));
  return s;
}

/** the big cluster of the partial sync cost tests */
const BIG = 2_000;

describe("nft partial sync cost", () => {
  // svc0 sorts first at any size, so it gets the same slot and the same
  // transaction at 10 and at 2,000 services. 200 times the services shows a cost that grows
  // with the cluster as plainly as 1,000 times would, for a fifth of the CPU (a full sync of
  // 10,000 services was most of the unit suite's).
  const changes = [
    {
      name: "an endpoint replaced (same count)",
      endpoints: [...tenEndpoints(0).slice(0, 9), 999_999],
      // still dispatch-tcp-port0-10: 1 delete-element + 1 add-element statement on cluster-endpoints-tcp
      statements: 2,
    },
    {
      name: "an endpoint added",
      endpoints: [...tenEndpoints(0), 999_999],
      // add chain dispatch-tcp-port0-11 + its rule (its first user), the verdict moves there
      // (delete + add on service-ips), 1 add-element on cluster-endpoints-tcp
      statements: 5,
    },
    {
      name: "an endpoint removed from the middle",
      endpoints: tenEndpoints(0).filter((x) => x !== 4),
      // add chain dispatch-tcp-port0-9 + its rule, the verdict moves there (delete + add), index 4
      // takes the last endpoint and index 9 goes (positions.ts: 1 delete + 1 add statement)
      statements: 6,
    },
    {
      name: "the last endpoint removed",
      endpoints: [],
      // delete-element of the 10 endpoints, of the target port and of the verdict (one statement
      // per map), add to no-endpoint-services; dispatch-tcp-port0-10 keeps its other users
      statements: 4,
    },
  ];

  type Cost = { statements?: number; printed: string };
  /** one change over a fresh full sync of n services */
  async function fresh(n: number, endpoints: number[]): Promise<Cost> {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const before = cluster(n);
    await backend.apply(before, null);
    const { state, change } = nextState(before, [service(0, endpoints)]);
    await backend.apply(state, change);
    return { statements: backend.last?.statements, printed: ctx.printed.at(-1) ?? "" };
  }
  /**
   * Every change over one full sync of 2,000 services, each undone (svc0 back to its ten
   * endpoints) before the next: the full sync is most of this file's CPU. Run once, for
   * every case's test.
   */
  let inTurn: Promise<Map<string, Cost>> | undefined;
  async function changesInTurn(): Promise<Map<string, Cost>> {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const before = cluster(BIG);
    await backend.apply(before, null);
    const costs = new Map<string, Cost>();
    for (const c of changes) {
      const { state, change } = nextState(before, [service(0, c.endpoints)]);
      await backend.apply(state, change);
      costs.set(c.name, { statements: backend.last?.statements, printed: ctx.printed.at(-1) ?? "" });
      const undo = nextState(state, [service(0, tenEndpoints(0))]);
      await backend.apply(undo.state, undo.change);
    }
    return costs;
  }

  for (const c of changes)
    test(`${c.name}: ${c.statements} statements at 10 and at 2,000 services`, async () => {
      // at 10, a fresh backend; at 2,000, the one taking every change in turn, which must
      // send the same transaction, byte for byte, as the fresh one at 10 (so the undos left
      // nothing behind, and the cost does not grow with the services)
      const small = await fresh(10, c.endpoints);
      const big = (await (inTurn ??= changesInTurn())).get(c.name);
      expect({ n: 10, statements: small.statements }).toEqual({ n: 10, statements: c.statements });
      expect({ n: BIG, statements: big?.statements }).toEqual({ n: BIG, statements: c.statements });
      expect(big?.printed).toBe(small.printed);
    });

  test("an unchanged service in the change set costs nothing", async () => {
    const { exec, calls } = recorder();
    const backend = createNftBackend(context(nodeConfig()), { exec });
    const state = cluster(3);
    await backend.apply(state, null);
    await backend.apply({ ...state, rev: 2 }, new Set(["ns1/svc1"]));
    expect(calls.filter(isTransaction)).toHaveLength(1);
  });

  test("a deleted service: its elements go before its chains", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    // affinity: svc1 has chains of its own
    const sticky = (i: number) =>
      entry(
        svc({ namespace: `ns${i}`, name: `svc${i}`, clusterIPs: [ip4(i, 10)], ports: [{ name: "http", port: 80 }], affinitySeconds: 60 }),
        Object.fromEntries(tenEndpoints(i).map((x) => [`p${x}`, epAt(x)])),
      );
    const before = nodeState([service(0, tenEndpoints(0)), sticky(1)]);
    await backend.apply(before, null);
    const { state, change } = nextState(before, [], ["ns1/svc1"]);
    await backend.apply(state, change);
    const text = ctx.printed.at(-1)!;
    expect(text).toMatch(/^delete element ip kpng cluster-ips \{ 10\.0\.0\.1 \}$/m);
    expect(text).toMatch(/^delete chain ip kpng svc-[A-Z2-7]{8}-ns1\/svc1\/tcp\/http$/m);
    expect(text.indexOf("delete element ip kpng service-ips")).toBeLessThan(text.indexOf("delete chain"));
    expect(text).not.toContain("add ");
  });

  test("a shared dispatch chain comes with its first user and goes after its last", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const before = cluster(3);
    await backend.apply(before, null);
    const eleven = nextState(before, [service(1, [...tenEndpoints(1), 999_999])]);
    await backend.apply(eleven.state, eleven.change);
    const back = nextState(eleven.state, [service(1, tenEndpoints(1))]);
    await backend.apply(back.state, back.change);
    const [created, deleted] = ctx.printed.slice(1);
    expect(created.indexOf("add chain ip kpng dispatch-tcp-port0-11\n")).toBeLessThan(created.indexOf("goto dispatch-tcp-port0-11"));
    expect(deleted).toMatch(/^delete chain ip kpng dispatch-tcp-port0-11$/m);
    expect(deleted.indexOf("delete element ip kpng service-ips")).toBeLessThan(deleted.indexOf("delete chain"));
    expect(deleted).not.toContain("dispatch-tcp-port0-10\n"); // still used by svc0 and svc2
  });
});

/** map/set elements written by a printed transaction (element lists hold no commas but between elements) */
function elementsWritten(text: string): number {
  let n = 0;
  for (const line of text.split("\n")) {
    const m = /^(?:add|delete) element \S+ kpng \S+ \{ (.*) \}$/.exec(line);
    if (m) n += m[1].split(", ").length;
  }
  return n;
}

describe("nft rolling a big service (a Deployment update, 100 endpoints a wave)", () => {
  // svc0 with `size` endpoints, every other one on this node (so hairpin entries change too).
  // Old pod j is p<j> at 11.x; its replacement is q<j> at 12.x, sorting after every old
  // address: given in sorted order, positions would shift for most of the list.
  const pod = (name: string, x: number, first: number): [string, ReturnType<typeof ep>] => [
    name,
    ep({ ips: [ip4(x, first)], local: x % 2 === 0, ports: { http: 8080 } }),
  ];
  /** old pods [gone, size), those below `replaced` replaced by new ones; then `surge` more new pods */
  const big = (size: number, o: { replaced?: number; surge?: number; gone?: number } = {}) => {
    const eps: [string, ReturnType<typeof ep>][] = [];
    for (let j = o.gone ?? 0; j < size; j++) eps.push(j < (o.replaced ?? 0) ? pod(`q${j}`, j, 12) : pod(`p${j}`, j, 11));
    for (let k = 0; k < (o.surge ?? 0); k++) eps.push(pod(`s${k}`, (1 << 20) | k, 12));
    return entry(
      svc({ namespace: "ns0", name: "svc0", clusterIPs: [ip4(0, 10)], ports: [{ name: "http", port: 80 }] }),
      Object.fromEntries(eps),
    );
  };
  /** a wave's text with the size taken out: positions past it numbered from it, counts and chain names N */
  const sizeFree = (text: string, size: number) =>
    text
      .replace(/ \. (\d+) :/g, (_, i: string) => ` . ${+i >= size ? `N+${+i - size}` : i} :`)
      .replace(/(-|mod )(\d+)\b/g, (m, pre: string, n: string) => (+n === size ? `${pre}N` : +n === size + 100 ? `${pre}N+100` : m));
  const others = Array.from({ length: 10 }, (_, i) => service(i + 1, tenEndpoints(i + 1)));

  const rolls = [
    {
      name: "a slice's 100 endpoints replaced by new pods",
      waves: [{ replaced: 100 }, { replaced: 200 }, { replaced: 300 }],
      // each wave: the 100 new pods take the 100 freed positions, the count stays (same
      // dispatch chain): delete-element + add-element on cluster-endpoints-tcp (100 + 100) and
      // on hairpin (50 + 50 local pods) = 4 statements, 300 elements, at any size
      cost: [
        { statements: 4, elements: 300 },
        { statements: 4, elements: 300 },
        { statements: 4, elements: 300 },
      ],
    },
    {
      name: "with a surge: 100 new pods come, then 100 old ones go",
      waves: [{ surge: 100 }, { surge: 100, gone: 100 }],
      cost: [
        // add chain dispatch-tcp-port0-(size+100) + its rule, the verdict moves there (delete +
        // add on service-ips), add 100 on cluster-endpoints-tcp and 50 on hairpin, delete the
        // chain of `size` (no other user): 7 statements; 1 + 1 + 100 + 50 elements
        { statements: 7, elements: 152 },
        // back to dispatch-tcp-port0-(size): add chain + rule, verdict delete + add, delete chain;
        // the last 100 positions move into the 100 freed ones: cluster-endpoints-tcp deletes
        // 100 freed + 100 tail, adds 100; hairpin deletes 50: 8 statements; 2 + 200 + 100 + 50 elements
        { statements: 8, elements: 352 },
      ],
    },
  ];

  for (const r of rolls)
    test(`${r.name}: the same statements and elements per wave at 500 and at 2,000 endpoints`, async () => {
      const firstWave: string[] = [];
      for (const size of [500, 2000]) {
        const ctx = context(nodeConfig({ dryRun: true }));
        const backend = createNftBackend(ctx);
        let state = nodeState([big(size), ...others]);
        await backend.apply(state, null);
        const got = [];
        for (const w of r.waves) {
          const next = nextState(state, [big(size, w)]);
          await backend.apply(next.state, next.change);
          got.push({ statements: backend.last?.statements, elements: elementsWritten(ctx.printed.at(-1)!) });
          state = next.state;
        }
        expect({ size, got }).toEqual({ size, got: r.cost });
        firstWave.push(sizeFree(ctx.printed[1], size));
      }
      expect(firstWave[1]).toBe(firstWave[0]);
    });
});

describe("nft dispatch positions across syncs", () => {
  test("two cluster IPs of one family (not from Kubernetes, but possible on the wire): a changed one gets every position", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const two = (second: number, eps: number[]) =>
      entry(
        svc({ name: "two", clusterIPs: [ip4(1, 10), ip4(second, 10)], ports: [{ name: "http", port: 80 }] }),
        Object.fromEntries(eps.map((x) => [`p${x}`, epAt(x)])),
      );
    const before = nodeState([two(2, [1, 2, 3])]);
    await backend.apply(before, null);
    const { state, change } = nextState(before, [two(3, [1, 2, 4])]);
    await backend.apply(state, change);
    const added = /^add element ip kpng cluster-endpoints-tcp \{ (.*) \}$/m.exec(ctx.printed[1])?.[1].split(", ") ?? [];
    // 10.0.0.1 keeps positions 0 and 1, its position 2 takes the new endpoint; all three under 10.0.0.3 are new
    expect(added.sort()).toEqual([
      "10.0.0.1 . 2 : 11.0.0.4",
      "10.0.0.3 . 0 : 11.0.0.1",
      "10.0.0.3 . 1 : 11.0.0.2",
      "10.0.0.3 . 2 : 11.0.0.4",
    ]);
  });
});

describe("nft dispatch lists claimed by two services", () => {
  test("two services on one cluster IP (a delete and a create crossing): the lower key's list wins whole, the other's replaces it when it leaves", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const on1 = (name: string, eps: number[]) =>
      entry(
        svc({ name, clusterIPs: [ip4(1, 10)], ports: [{ name: "http", port: 80 }] }),
        Object.fromEntries(eps.map((x) => [`p${x}`, epAt(x)])),
      );
    const elements = (text: string, verb: string) =>
      (new RegExp(`^${verb} element ip kpng cluster-endpoints-tcp \\{ (.*) \\}$`, "m").exec(text)?.[1].split(", ") ?? []).sort();
    const before = nodeState([on1("a", [1, 2, 3]), on1("b", [4, 5])]);
    await backend.apply(before, null);
    expect(elements(ctx.printed[0], "add")).toEqual(["10.0.0.1 . 0 : 11.0.0.1", "10.0.0.1 . 1 : 11.0.0.2", "10.0.0.1 . 2 : 11.0.0.3"]);
    const { state, change } = nextState(before, [], ["default/a"]);
    await backend.apply(state, change);
    // positions 0 and 1 change value, position 2 goes (b has two endpoints)
    expect(elements(ctx.printed[1], "delete")).toEqual(["10.0.0.1 . 0", "10.0.0.1 . 1", "10.0.0.1 . 2"]);
    expect(elements(ctx.printed[1], "add")).toEqual(["10.0.0.1 . 0 : 11.0.0.4", "10.0.0.1 . 1 : 11.0.0.5"]);
    const last = nextState(state, [], ["default/b"]);
    await backend.apply(last.state, last.change);
    expect(elements(ctx.printed[2], "delete")).toEqual(["10.0.0.1 . 0", "10.0.0.1 . 1"]);
    expect(elements(ctx.printed[2], "add")).toEqual([]);
  });
});

describe("nft sync failures", () => {
  test("a refused partial transaction is retried at once as a full sync", async () => {
    let n = 0;
    const { exec, calls } = recorder((argv) =>
      isTransaction({ argv }) && ++n === 2 ? "nft: Error: No such file or directory" : undefined,
    );
    const ctx = context(nodeConfig());
    const backend = createNftBackend(ctx, { exec });
    const before = cluster(3);
    await backend.apply(before, null);
    const { state, change } = nextState(before, [service(1, [1, 2])]);
    await backend.apply(state, change);
    const nft = calls.filter(isTransaction);
    expect(nft).toHaveLength(3);
    expect(nft[1].stdin).not.toContain("add table");
    // the full resync reads what the tables hold first, and rewrites them in place (rewrite-in-place.ts)
    expect(calls.at(-2)?.argv).toContain("list");
    expect(nft[2].stdin?.startsWith('add table ip kpng { comment "rules for kpng, the Kubernetes service proxy"; }\n')).toBe(true);
    expect(nft[2].stdin).not.toContain("delete table");
    expect(backend.last?.full).toBe(true);
    expect(ctx.lines.some((l) => l.includes("WARN") && l.includes("partial sync failed"))).toBe(true);
  });

  test("a refused full sync fails the apply, and the next apply is full again, re-creating the tables whole", async () => {
    let fail = true;
    const { exec, calls } = recorder((argv) => (isTransaction({ argv }) && fail ? "nft: Error: Operation not supported" : undefined));
    const backend = createNftBackend(context(nodeConfig()), { exec });
    const before = cluster(2);
    await expect(backend.apply(before, null)).rejects.toThrow("Operation not supported");
    expect(calls.filter(isTransaction)[0].stdin).not.toContain("delete table");
    fail = false;
    const { state, change } = nextState(before, [service(1, [1])]);
    await backend.apply(state, change);
    expect(backend.last?.full).toBe(true);
    // whatever made the in-place sync fail, deleting and re-creating the tables cannot hit it
    expect(calls.at(-1)?.stdin).toStartWith("add table ip kpng\ndelete table ip kpng\n");
    // and once that worked, full syncs are in place again
    await backend.apply(state, null);
    expect(calls.at(-1)?.stdin).not.toContain("delete table");
  });

  test("a listing of the tables that fails: the full sync re-creates them whole, and says so", async () => {
    const { exec, calls } = recorder((argv) => (argv.includes("list") ? "nft: Error: Operation not permitted" : undefined));
    const ctx = context(nodeConfig());
    await createNftBackend(ctx, { exec }).apply(cluster(2), null);
    expect(calls.at(-1)?.stdin).toStartWith("add table ip kpng\ndelete table ip kpng\n");
    expect(ctx.lines.filter((l) => l.includes("WARN"))).toEqual([expect.stringContaining("cannot list kpng's tables")]);
  });

  test("a transaction with an invalid name is never sent", async () => {
    const { exec, calls } = recorder();
    const tx = new Transaction().add({ kind: "chain", verb: "add", family: "ip", chain: { name: "bad name; flush ruleset" } });
    await expect(new NftRunner(exec).apply(tx)).rejects.toThrow("invalid nft name");
    expect(calls).toHaveLength(0);
  });

  test("setup validates the whole skeleton with nft --check", async () => {
    const { exec, calls } = recorder();
    await createNftBackend(context(nodeConfig()), { exec }).setup();
    expect(calls[0].argv).toEqual(["nft", "--check", "-f", "-"]);
    expect(calls[0].stdin).toContain("add chain ip kpng nat-prerouting");
  });

  test("setup's skeleton is what a full sync of no service re-creating the tables sends", async () => {
    const { exec, calls } = recorder();
    await createNftBackend(context(nodeConfig()), { exec }).setup();
    const empty = new NftSync(nodeConfig()).plan({ nodeName: "", rev: 0, services: new Map() }, null);
    expect(calls[0].stdin).toBe(empty.tx.print());
  });

  test("setup reports a kernel that refuses the rules as unavailable", async () => {
    const { exec } = recorder(() => "Error: Could not process rule: No such file or directory");
    await expect(createNftBackend(context(nodeConfig()), { exec }).setup()).rejects.toThrow("[unavailable]");
  });
});

describe("nft element ownership", () => {
  const shared = (name: string, endpoint: number) =>
    entry(svc({ name, clusterIPs: [v4.clusterIP(endpoint)], externalIPs: [v4.external(1)], ports: [{ name: "http", port: 80 }] }), {
      a: epAt(endpoint),
    });

  test("two services on one external IP and port: the lower key wins, the other takes over when it leaves", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const before = nodeState([shared("a", 1), shared("b", 2)]);
    await backend.apply(before, null);
    expect(ctx.printed[0]).toMatch(/198\.18\.64\.1 \. tcp \. 80 comment "default\/a\/tcp\/http" : goto ext-[A-Z2-7]{8}-default\/a\//);
    expect(ctx.printed[0]).not.toMatch(/198\.18\.64\.1 \. tcp \. 80 comment "default\/b/);
    const { state, change } = nextState(before, [], ["default/a"]);
    await backend.apply(state, change);
    expect(ctx.printed[1]).toMatch(/^delete element ip kpng service-ips \{ [^}]*198\.18\.64\.1 \. tcp \. 80/m);
    expect(ctx.printed[1]).toMatch(
      /^add element ip kpng service-ips \{ 198\.18\.64\.1 \. tcp \. 80 comment "default\/b\/tcp\/http" : goto ext-[A-Z2-7]{8}-default\/b\//m,
    );
  });

  test("a set first written by a partial sync, two services claiming one key: the lower key wins, the other takes over when it leaves", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    // the full sync writes nothing to firewall-ips: the two services come later, in one change
    const before = nodeState([shared("z", 3)]);
    await backend.apply(before, null);
    expect(ctx.printed[0]).not.toMatch(/element ip kpng firewall-ips/);
    const guarded = (name: string, endpoint: number) =>
      entry(
        svc({
          name,
          clusterIPs: [v4.clusterIP(endpoint)],
          lbIPs: [v4.external(9)],
          sourceRanges: ["198.18.128.0/24"],
          ports: [{ name: "http", port: 80 }],
        }),
        { a: epAt(endpoint) },
      );
    const both = nextState(before, [guarded("d", 4), guarded("c", 5)]);
    await backend.apply(both.state, both.change);
    const firewall = (text: string, verb: string) =>
      new RegExp(`^${verb} element ip kpng firewall-ips \\{ ([^}]*) \\}$`, "m").exec(text)?.[1];
    expect(firewall(ctx.printed[1], "add")).toMatch(
      /^198\.18\.64\.9 \. tcp \. 80 comment "default\/c\/tcp\/http" : goto fw-[A-Z2-7]{8}-default\/c\/0$/,
    );
    const { state, change } = nextState(both.state, [], ["default/c"]);
    await backend.apply(state, change);
    expect(firewall(ctx.printed[2], "delete")).toBe("198.18.64.9 . tcp . 80");
    expect(firewall(ctx.printed[2], "add")).toMatch(
      /^198\.18\.64\.9 \. tcp \. 80 comment "default\/d\/tcp\/http" : goto fw-[A-Z2-7]{8}-default\/d\/0$/,
    );
  });
});

describe("nft dry-run", () => {
  test("the same state prints the same transaction", async () => {
    const outs = await Promise.all(
      [1, 2].map(async () => {
        const ctx = context(nodeConfig({ dryRun: true }));
        await createNftBackend(ctx).apply(cluster(20), null);
        return ctx.printed.join("");
      }),
    );
    expect(outs[1]).toBe(outs[0]);
  });

  test("conntrack deletions are printed as comments after the transaction", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    const backend = createNftBackend(ctx);
    const udp = (eps: number[]) =>
      entry(
        svc({ name: "dns", clusterIPs: [v4.clusterIP(5)], ports: [{ name: "dns", protocol: "UDP", port: 53 }] }),
        Object.fromEntries(eps.map((x) => [`p${x}`, ep({ ips: [ip4(x, 11)], ports: { dns: 5353 } })])),
      );
    const before = nodeState([udp([1, 2])]);
    await backend.apply(before, null);
    const { state, change } = nextState(before, [udp([2])]);
    await backend.apply(state, change);
    expect(ctx.printed[1].trimEnd().split("\n").at(-1)).toBe(
      "# conntrack -D -f ipv4 -p udp --orig-dst 198.18.0.5 --orig-port-dst 53 --reply-src 11.0.0.1 --reply-port-src 5353",
    );
  });

  test("cleanup prints the deletion of both tables", async () => {
    const ctx = context(nodeConfig({ dryRun: true }));
    await createNftBackend(ctx).cleanup();
    expect(ctx.printed[0]).toBe("add table ip kpng\ndelete table ip kpng\nadd table ip6 kpng\ndelete table ip6 kpng\n");
  });
});

describe("a first load's base, sent ahead (NftSync.firstLoadBase)", () => {
  const nothing = { ip: { chains: new Map(), sets: new Map() }, ip6: { chains: new Map(), sets: new Map() } };

  test("creates both tables and their base objects: the ops of a full sync over nothing that no service needs", () => {
    const sync = new NftSync(nodeConfig());
    const ahead = sync.firstLoadBase()!;
    const plan = sync.finish(sync.render(cluster(3), null), nothing);
    const covered = plan.tx.ops.filter((op) => ahead.covers.has(op));
    expect(covered).toHaveLength(ahead.covers.size);
    // the same statements, but that the tables are created (failing if one exists) rather than added
    const printed = covered.reduce((t, op) => t.add(op), new Transaction()).print();
    expect(ahead.tx.print()).toBe(printed.replaceAll(/^add table /gm, "create table "));
    expect(ahead.tx.print().match(/^create table .*$/gm)).toEqual([
      'create table ip kpng { comment "rules for kpng, the Kubernetes service proxy"; }',
      'create table ip6 kpng { comment "rules for kpng, the Kubernetes service proxy"; }',
    ]);
    // what is left: the services' objects and elements, no table
    const rest = plan.tx.ops.filter((op) => !ahead.covers.has(op));
    expect(rest.some((op) => op.kind === "table")).toBe(false);
    expect(rest.some((op) => op.kind === "elements" && op.set === "service-ips")).toBe(true);
  });

  test("none after a refused full sync in place: the next one replaces the tables whole", () => {
    const sync = new NftSync(nodeConfig());
    sync.plan(cluster(3), null, nothing);
    sync.reset();
    expect(sync.firstLoadBase()).toBeUndefined();
  });
});
