// Stable dispatch positions (plugins/nft/positions.ts): an endpoint keeps its
// position while it stays, so a change moves O(change) map elements.

import { describe, expect, test } from "bun:test";
import { place } from "../../plugins/nft/positions.ts";

const same = (s: string) => s;
const byText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
/** positions whose endpoint differs between two orders (each is one map element rewritten or added/removed) */
const moved = (a: readonly string[], b: readonly string[]) => {
  let n = 0;
  for (let i = 0; i < Math.max(a.length, b.length); i++) if (a[i] !== b[i]) n++;
  return n;
};

describe("nft dispatch positions", () => {
  const cases = [
    { name: "no previous order: sorted", prev: undefined, next: ["b", "c", "a"], want: ["a", "b", "c"] },
    { name: "nothing changed: same order, even if not sorted", prev: ["c", "a", "b"], next: ["a", "b", "c"], want: ["c", "a", "b"] },
    { name: "a replaced endpoint takes the freed position", prev: ["a", "b", "c"], next: ["a", "c", "z"], want: ["a", "z", "c"] },
    {
      name: "arrivals fill holes lowest first, in sorted order",
      prev: ["a", "b", "c", "d"],
      next: ["y", "b", "d", "x"],
      want: ["x", "b", "y", "d"],
    },
    { name: "more arrivals than holes: the rest go to the end", prev: ["a", "b"], next: ["b", "x", "y"], want: ["x", "b", "y"] },
    {
      name: "a removal in the middle: the last moves into the hole",
      prev: ["a", "b", "c", "d", "e"],
      next: ["a", "c", "d", "e"],
      want: ["a", "e", "c", "d"],
    },
    { name: "removals at the end: nothing moves", prev: ["a", "b", "c", "d"], next: ["a", "b"], want: ["a", "b"] },
    {
      name: "holes at both ends: the end shrinks first, then fills the front",
      prev: ["a", "b", "c", "d", "e"],
      next: ["b", "c", "d"],
      want: ["d", "b", "c"],
    },
    { name: "all gone", prev: ["a", "b"], next: [], want: [] },
    { name: "all new", prev: ["a", "b"], next: ["x", "y", "z"], want: ["x", "y", "z"] },
  ];
  for (const c of cases) test(c.name, () => expect(place(c.prev, c.next, same, byText)).toEqual(c.want));

  // 1,000 endpoints in 10 waves: every old one replaced, as at 5,000 in 50 (a fifth of the
  // size, a twenty-fifth of the CPU)
  test("a rolling update of 1,000 moves only the endpoints it replaces, and the list stays dense", () => {
    let order = Array.from({ length: 1000 }, (_, i) => `old${String(i).padStart(4, "0")}`);
    for (let wave = 0; wave < 10; wave++) {
      // the wave's 100 new pods sort anywhere; 100 old ones go
      const live = new Set(order);
      for (let j = 0; j < 100; j++) live.delete(`old${String(wave * 100 + j).padStart(4, "0")}`);
      for (let j = 0; j < 100; j++) live.add(`new${String((j * 37 + wave * 101) % 10000).padStart(4, "0")}w${wave}`);
      const next = place(order, [...live], same, byText);
      expect(next).toHaveLength(1000);
      expect(new Set(next)).toEqual(live);
      expect(moved(order, next)).toBe(100);
      order = next;
    }
  });

  test("a scale-down by 100 of 5,000 rewrites at most 200 positions (100 moved in, 100 gone at the end)", () => {
    const order = Array.from({ length: 5000 }, (_, i) => `e${String(i).padStart(4, "0")}`);
    const gone = new Set(Array.from({ length: 100 }, (_, j) => order[j * 50]));
    const next = place(
      order,
      order.filter((e) => !gone.has(e)),
      same,
      byText,
    );
    expect(next).toHaveLength(4900);
    expect(next.some((e) => gone.has(e))).toBe(false);
    expect(moved(order, next)).toBeLessThanOrEqual(200);
  });
});
