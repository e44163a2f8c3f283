import { describe, expect, test } from "bun:test";
import { deepEqual, DiffStore } from "../../../src/core/api/client/diffstore.ts";

type Round = (s: DiffStore<string, string[]>) => void;
const rules = () => new DiffStore<string, string[]>({ create: () => [] });
const keys = (d: {
  created: Array<[string, ...unknown[]]>;
  updated: Array<[string, ...unknown[]]>;
  deleted: Array<[string, ...unknown[]]>;
}) => ({
  created: d.created.map((e) => e[0]),
  updated: d.updated.map((e) => e[0]),
  deleted: d.deleted.map((e) => e[0]),
});

const cases: Array<{ name: string; rounds: Round[]; want: { created: string[]; updated: string[]; deleted: string[] } }> = [
  {
    name: "first round: everything written is created",
    rounds: [(s) => s.get("a").push("r1")],
    want: { created: ["a"], updated: [], deleted: [] },
  },
  {
    name: "same value rewritten: nothing changed",
    rounds: [(s) => s.get("a").push("r1"), (s) => s.get("a").push("r1")],
    want: { created: [], updated: [], deleted: [] },
  },
  {
    name: "different value: updated",
    rounds: [(s) => s.get("a").push("r1"), (s) => s.get("a").push("r2")],
    want: { created: [], updated: ["a"], deleted: [] },
  },
  {
    name: "key not written this round: deleted",
    rounds: [(s) => (s.get("a"), s.get("b")), (s) => s.get("a")],
    want: { created: [], updated: [], deleted: ["b"] },
  },
  {
    name: "touched key: kept with last round's value, not updated",
    rounds: [(s) => s.get("a").push("r1"), (s) => void s.touch("a")],
    want: { created: [], updated: [], deleted: [] },
  },
  {
    name: "touching a key the store never had keeps nothing",
    rounds: [(s) => void s.touch("ghost")],
    want: { created: [], updated: [], deleted: [] },
  },
  {
    name: "get twice in a round: the same value, built up",
    rounds: [(s) => s.get("a").push("r1"), (s) => (s.get("a").push("r1"), s.get("a").push("r2"))],
    want: { created: [], updated: ["a"], deleted: [] },
  },
  {
    name: "after reset: everything is created again",
    rounds: [(s) => s.get("a").push("r1"), (s) => (s.reset(), s.get("a").push("r1"))],
    want: { created: ["a"], updated: [], deleted: [] },
  },
];

describe("DiffStore", () => {
  for (const c of cases) {
    test(c.name, () => {
      const s = rules();
      let last = { created: [] as string[], updated: [] as string[], deleted: [] as string[] };
      for (const round of c.rounds) {
        round(s);
        last = keys(s.done());
      }
      expect(last).toEqual(c.want);
    });
  }

  test("updated and deleted entries carry the previous value", () => {
    const s = new DiffStore<string, number>();
    s.set("a", 1);
    s.set("b", 2);
    s.done();
    s.set("a", 3);
    expect(s.done()).toEqual({ created: [], updated: [["a", 3, 1]], deleted: [["b", 2]] });
    expect([...s.entries()]).toEqual([["a", 3]]);
  });

  test("get without a create function tells how to use the store", () => {
    expect(() => new DiffStore<string, number>().get("x")).toThrow(/use set/);
  });

  test("a custom equality decides what is an update", () => {
    const s = new DiffStore<string, { v: number; seen: number }>({ equals: (a, b) => a.v === b.v });
    s.set("a", { v: 1, seen: 1 });
    s.done();
    s.set("a", { v: 1, seen: 2 });
    expect(s.done().updated).toHaveLength(0);
  });
});

describe("deepEqual", () => {
  const table: Array<[string, unknown, unknown, boolean]> = [
    ["equal nested objects", { a: [1, { b: "x" }] }, { a: [1, { b: "x" }] }, true],
    ["different array lengths", [1, 2], [1], false],
    ["missing key", { a: 1 }, { b: 1 }, false],
    ["equal bytes", Uint8Array.of(1, 2), Uint8Array.of(1, 2), true],
    ["different bytes", Uint8Array.of(1, 2), Uint8Array.of(1, 3), false],
    ["equal maps", new Map([["k", [1]]]), new Map([["k", [1]]]), true],
    ["maps with different values", new Map([["k", 1]]), new Map([["k", 2]]), false],
    ["bigints", 10n, 10n, true],
    ["NaN equals NaN", Number.NaN, Number.NaN, true],
    ["array vs object with the same keys", [1], { 0: 1 }, false],
  ];
  for (const [name, a, b, want] of table) test(name, () => expect(deepEqual(a, b)).toBe(want));
});
