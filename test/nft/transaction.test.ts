import { describe, expect, test } from "bun:test";
import { splitFirstLoad, Transaction, type Op } from "../../plugins/nft/transaction.ts";

const els = (set: string, keys: string[]): Op => ({
  kind: "elements",
  verb: "add",
  family: "ip",
  set,
  items: keys.map((key) => ({ key })),
});
const keys = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
const tx = (ops: Op[]) => ops.reduce((t, op) => t.add(op), new Transaction());
/** per transaction: its statements, elements shown as "set:first..last (count)" */
const shape = (ts: Transaction[]) =>
  ts.map((t) =>
    t.ops.map((op) =>
      op.kind === "elements" ? `${op.verb} ${op.set}:${op.items[0].key}..${op.items.at(-1)!.key} (${op.items.length})` : `${op.kind}`,
    ),
  );

const skeleton: Op[] = [
  { kind: "table", verb: "add", family: "ip" },
  { kind: "map", verb: "add", family: "ip", set: { name: "a", type: "ipv4_addr : verdict" } },
  { kind: "set", verb: "add", family: "ip", set: { name: "b", type: "ipv4_addr" } },
  { kind: "rule", family: "ip", chain: "services", rule: "ip daddr @b counter" },
];

describe("splitFirstLoad", () => {
  const cases: Array<{ name: string; ops: Op[]; parts: number; min: number; want: string[][] }> = [
    {
      name: "below the minimum: whole",
      ops: [...skeleton, els("a", keys("a", 5))],
      parts: 2,
      min: 6,
      want: [["table", "map", "set", "rule", "add a:a0..a4 (5)"]],
    },
    {
      name: "one part: whole",
      ops: [...skeleton, els("a", keys("a", 5))],
      parts: 1,
      min: 1,
      want: [["table", "map", "set", "rule", "add a:a0..a4 (5)"]],
    },
    {
      name: "elements after the skeleton, in order, in batches of about the same size, a set's statement cut where a batch fills",
      ops: [skeleton[0], skeleton[1], els("a", keys("a", 6)), skeleton[2], els("b", keys("b", 4)), skeleton[3]],
      parts: 3,
      min: 10,
      want: [["table", "map", "set", "rule"], ["add a:a0..a3 (4)"], ["add a:a4..a5 (2)", "add b:b0..b1 (2)"], ["add b:b2..b3 (2)"]],
    },
    {
      name: "deleted elements stay with the skeleton; empty statements and empty batches go",
      ops: [
        ...skeleton,
        els("a", []),
        { kind: "elements", verb: "delete", family: "ip", set: "b", items: [{ key: "x" }] },
        els("b", keys("b", 3)),
      ],
      parts: 4,
      min: 3,
      want: [["table", "map", "set", "rule", "delete b:x..x (1)"], ["add b:b0..b0 (1)"], ["add b:b1..b1 (1)"], ["add b:b2..b2 (1)"]],
    },
  ];
  for (const c of cases)
    test(c.name, () => {
      const whole = tx(c.ops);
      const split = splitFirstLoad(whole, c.parts, c.min);
      expect(shape(split)).toEqual(c.want);
      // nothing lost, nothing doubled
      const lines = (ts: Transaction[]) =>
        ts.flatMap((t) =>
          t.ops.flatMap((op) => (op.kind === "elements" ? op.items.map((e) => `${op.verb} ${op.set} ${e.key}`) : [JSON.stringify(op)])),
        );
      expect(lines(split).sort()).toEqual(lines([whole]).sort());
    });
});

describe("Transaction.statements", () => {
  test("the lines print() gives, counted without printing: an empty element list is no statement, a note is one", () => {
    const t = tx([...skeleton, els("a", keys("a", 3)), els("b", []), { kind: "note", text: "why" }]);
    expect(t.statements).toBe(6);
    expect(t.print().trimEnd().split("\n")).toHaveLength(t.statements);
  });
});
