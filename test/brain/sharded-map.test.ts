// The brain's immutable map of services: a copy with updates applied holds
// what a Map would, leaves the original as it was, and counts its entries,
// whether it starts empty (a first state) or not.

import { describe, expect, test } from "bun:test";
import { ShardedMap } from "../../src/core/brain/sharded-map.ts";

const entries = (m: ReadonlyMap<string, number>) => [...m].sort(([a], [b]) => a.localeCompare(b));

describe("ShardedMap", () => {
  test("from empty: the updates' entries, nulls left out", () => {
    const m = ShardedMap.empty<number>().with(
      new Map<string, number | null>([
        ["ns/a", 1],
        ["ns/b", null],
        ["ns/c", 3],
      ]),
    );
    expect(m.size).toBe(2);
    expect(entries(m)).toEqual([
      ["ns/a", 1],
      ["ns/c", 3],
    ]);
    expect(m.get("ns/b")).toBeUndefined();
    expect(m.has("ns/c")).toBe(true);
  });

  test("a copy with sets and deletes holds what a Map would; the original is unchanged", () => {
    const start = new Map(Array.from({ length: 600 }, (_, i) => [`ns-${i % 7}/svc-${i}`, i] as [string, number]));
    const first = ShardedMap.empty<number>().with(start);
    const updates = new Map<string, number | null>([
      ["ns-0/svc-0", null],
      ["ns-1/svc-1", 1001],
      ["ns-9/new", 7],
      ["ns-9/never-there", null],
    ]);
    const next = first.with(updates);
    const expected = new Map(start);
    for (const [k, val] of updates) val === null ? expected.delete(k) : expected.set(k, val);
    expect(entries(next)).toEqual(entries(expected));
    expect(next.size).toBe(expected.size);
    expect(entries(first)).toEqual(entries(start));
    expect(first.size).toBe(600);
    // emptied, then filled again
    const emptied = next.with(new Map([...next.keys()].map((k) => [k, null])));
    expect(emptied.size).toBe(0);
    expect(entries(emptied.with(new Map([["x/y", 1]])))).toEqual([["x/y", 1]]);
  });
});
