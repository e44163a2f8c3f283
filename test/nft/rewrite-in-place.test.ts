// What a full sync in place does with what kpng's tables hold
// (plugins/nft/rewrite-in-place.ts), without a kernel: nft's JSON listings read back,
// and the statements that clear the tables before the sync's own.

import { describe, expect, test } from "bun:test";
import { clearHeld, parseHoldings, type TableHoldings } from "../../plugins/nft/rewrite-in-place.ts";
import { printOp, type Op } from "../../plugins/nft/transaction.ts";

const listing = (...items: object[]) =>
  JSON.stringify({ nftables: [{ metainfo: { version: "1.0.6", json_schema_version: 1 } }, ...items] });

describe("nft listings of kpng's tables", () => {
  test("chains, sets and maps of ip kpng and ip6 kpng; other tables and the affinity sets' missing 'dynamic' flag as nft 1.0.6 prints them", () => {
    const held = parseHoldings([
      listing(
        {
          chain: {
            family: "ip",
            table: "kpng",
            name: "nat-prerouting",
            handle: 1,
            type: "nat",
            hook: "prerouting",
            prio: -100,
            policy: "accept",
          },
        },
        { chain: { family: "ip", table: "kpng", name: "services", handle: 2 } },
        { chain: { family: "ip", table: "filter", name: "INPUT", handle: 1, type: "filter", hook: "input", prio: 0, policy: "drop" } },
        { chain: { family: "inet", table: "kpng", name: "other", handle: 1 } },
        { chain: { family: "ip6", table: "kpng", name: "services", handle: 2 } },
      ),
      listing(
        { set: { family: "ip", name: "aff-X", table: "kpng", type: "ipv4_addr", handle: 5, flags: ["timeout"], timeout: 10800 } },
        { set: { family: "ip", name: "hairpin", table: "kpng", type: ["ipv4_addr", "ipv4_addr"], handle: 6 } },
        { set: { family: "ip", name: "nodeport-ips", table: "kpng", type: "ipv4_addr", handle: 7, flags: "interval" } },
      ),
      listing({
        map: {
          family: "ip",
          name: "service-ips",
          table: "kpng",
          type: ["ipv4_addr", "inet_proto", "inet_service"],
          handle: 3,
          map: "verdict",
        },
      }),
    ]);
    expect(held.ip.chains).toEqual(
      new Map([
        ["nat-prerouting", { base: { type: "nat", hook: "prerouting", prio: -100, policy: "accept" } }],
        ["services", { base: undefined }],
      ]),
    );
    expect(held.ip.sets).toEqual(
      new Map([
        ["aff-X", { kind: "set", type: "ipv4_addr", flags: ["timeout"], timeout: 10800 }],
        ["hairpin", { kind: "set", type: "ipv4_addr . ipv4_addr", flags: [], timeout: undefined }],
        ["nodeport-ips", { kind: "set", type: "ipv4_addr", flags: ["interval"], timeout: undefined }],
        ["service-ips", { kind: "map", type: "ipv4_addr . inet_proto . inet_service", flags: [], timeout: undefined }],
      ]),
    );
    expect([...held.ip6.chains.keys()]).toEqual(["services"]);
  });

  test("output that is not nft's JSON listing is an error, not an empty table", () => {
    expect(() => parseHoldings([""])).toThrow();
    expect(() => parseHoldings(['{"nftables": [{"chain": {"family": "ip"}}]}'])).toThrow();
  });
});

describe("nft: clearing what the tables hold before a full sync in place", () => {
  const aff = { name: "aff-A", type: "ipv4_addr", flags: ["dynamic", "timeout"], timeout: 600 };
  const wanted: Op[] = [
    { kind: "set", verb: "add", family: "ip", set: aff },
    { kind: "set", verb: "add", family: "ip", set: { name: "cluster-ips", type: "ipv4_addr" } },
    { kind: "set", verb: "add", family: "ip", set: { name: "nodeport-ips", type: "ipv4_addr", flags: ["interval"], autoMerge: true } },
    { kind: "map", verb: "add", family: "ip", set: { name: "service-ips", type: "ipv4_addr . inet_proto . inet_service : verdict" } },
    { kind: "chain", verb: "add", family: "ip", chain: { name: "nat-output", base: { type: "nat", hook: "output", priority: "-100" } } },
    { kind: "chain", verb: "add", family: "ip", chain: { name: "services" } },
  ];
  const nat = { type: "nat", hook: "output", prio: -100, policy: "accept" };
  const cases: Array<{ name: string; held: Partial<TableHoldings>; want: string[] }> = [
    { name: "an empty or missing table: nothing to clear", held: {}, want: [] },
    {
      name: "a wanted affinity set with the same definition: kept with its elements",
      held: { sets: new Map([["aff-A", { kind: "set", type: "ipv4_addr", flags: ["timeout"], timeout: 600 }]]) },
      want: [],
    },
    {
      name: "an affinity set whose timeout changed: deleted (added again empty)",
      held: { sets: new Map([["aff-A", { kind: "set", type: "ipv4_addr", flags: ["timeout"], timeout: 60 }]]) },
      want: ["delete set ip kpng aff-A"],
    },
    {
      name: "an affinity set of another key type: deleted",
      held: { sets: new Map([["aff-A", { kind: "set", type: "ipv4_addr . inet_service", flags: ["timeout"], timeout: 600 }]]) },
      want: ["delete set ip kpng aff-A"],
    },
    {
      name: "an affinity set no longer wanted (its endpoint or service went): deleted",
      held: { sets: new Map([["aff-B", { kind: "set", type: "ipv4_addr", flags: ["timeout"], timeout: 600 }]]) },
      want: ["delete set ip kpng aff-B"],
    },
    {
      name: "sets and maps the sync fills: deleted and added again, whatever their definition",
      held: {
        sets: new Map([
          ["cluster-ips", { kind: "set", type: "ipv4_addr", flags: [] }],
          ["service-ips", { kind: "map", type: "ipv4_addr . inet_proto . inet_service", flags: [] }],
          ["foreign", { kind: "set", type: "ipv4_addr", flags: [] }],
        ]),
      },
      want: ["delete set ip kpng cluster-ips", "delete map ip kpng service-ips", "delete set ip kpng foreign"],
    },
    {
      name: "an interval set wanted as it is: flushed (refilled by the sync), never empty to packets at the commit",
      held: { sets: new Map([["nodeport-ips", { kind: "set", type: "ipv4_addr", flags: ["interval"] }]]) },
      want: ["flush set ip kpng nodeport-ips"],
    },
    {
      name: "an interval set with another definition: deleted",
      held: { sets: new Map([["nodeport-ips", { kind: "set", type: "ipv6_addr", flags: ["interval"] }]]) },
      want: ["delete set ip kpng nodeport-ips"],
    },
    {
      name: "wanted chains as they are: flushed only",
      held: {
        chains: new Map([
          ["nat-output", { base: nat }],
          ["services", {}],
        ]),
      },
      want: ["flush chain ip kpng nat-output", "flush chain ip kpng services"],
    },
    {
      name: "stale and foreign chains: flushed, then deleted after the sets",
      held: {
        chains: new Map([
          ["svc-OLD", {}],
          ["foreign", {}],
        ]),
        sets: new Map([["cluster-ips", { kind: "set", type: "ipv4_addr", flags: [] }]]),
      },
      want: [
        "flush chain ip kpng svc-OLD",
        "flush chain ip kpng foreign",
        "delete set ip kpng cluster-ips",
        "delete chain ip kpng svc-OLD",
        "delete chain ip kpng foreign",
      ],
    },
    {
      name: "a base chain with policy drop, and a base chain where a regular one is wanted: deleted",
      held: {
        chains: new Map([
          ["nat-output", { base: { ...nat, policy: "drop" } }],
          ["services", { base: nat }],
        ]),
      },
      want: [
        "flush chain ip kpng nat-output",
        "flush chain ip kpng services",
        "delete chain ip kpng nat-output",
        "delete chain ip kpng services",
      ],
    },
    {
      name: "a base chain at another priority: deleted",
      held: { chains: new Map([["nat-output", { base: { ...nat, prio: 0 } }]]) },
      want: ["flush chain ip kpng nat-output", "delete chain ip kpng nat-output"],
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      const held: TableHoldings = { chains: c.held.chains ?? new Map(), sets: c.held.sets ?? new Map() };
      expect(clearHeld("ip", held, wanted).map(printOp)).toEqual(c.want);
    });

  test("the other family's statements say nothing about this table", () => {
    const held: TableHoldings = {
      chains: new Map(),
      sets: new Map([["aff-A", { kind: "set", type: "ipv6_addr", flags: ["timeout"], timeout: 600 }]]),
    };
    const other: Op[] = [{ kind: "set", verb: "add", family: "ip", set: { ...aff, type: "ipv6_addr" } }];
    expect(clearHeld("ip6", held, other).map(printOp)).toEqual(["delete set ip6 kpng aff-A"]);
  });
});
