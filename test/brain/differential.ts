// Differential testing of a hand-written check against the valibot schema it
// copies (fast-slice.ts, fast-service.ts): every field of a full object is
// deleted or replaced by values of every JSON type, and both verdicts and
// outputs must agree.

import { expect } from "bun:test";
import * as v from "valibot";

/** every path (as keys) to a value inside `o` */
export function paths(o: unknown, prefix: Array<string | number> = []): Array<Array<string | number>> {
  if (typeof o !== "object" || o === null) return [];
  const out: Array<Array<string | number>> = [];
  for (const [k, val] of Object.entries(o)) {
    const p = [...prefix, Array.isArray(o) ? Number(k) : k];
    out.push(p, ...paths(val, p));
  }
  return out;
}

/** a fresh `full()` with the value at `path` replaced by `value`, or deleted */
export function mutate(full: () => object, path: Array<string | number>, value: unknown, del: boolean): Record<string, unknown> {
  const o = full() as Record<string, unknown>;
  let cur = o as Record<string | number, unknown>;
  for (const k of path.slice(0, -1)) cur = cur[k] as Record<string | number, unknown>;
  const last = path.at(-1)!;
  if (del) delete cur[last];
  else cur[last] = value;
  return o;
}

/** `full()` changed at each of its paths in each way: the replacements, and a delete */
export function* variants(full: () => object, replacements: readonly unknown[]): Iterable<Record<string, unknown>> {
  for (const p of paths(full())) {
    for (const x of replacements) yield mutate(full, p, x, false);
    yield mutate(full, p, undefined, true);
  }
}

/** `fast` and `schema` both reject `raw`, or both accept it with equal outputs (keys in the same order too) */
export function expectSameVerdict(schema: v.GenericSchema, fast: (raw: Record<string, unknown>) => unknown, raw: Record<string, unknown>) {
  const slow = v.safeParse(schema, raw, { abortPipeEarly: true });
  const out = fast(raw);
  if (!slow.success) return expect(out).toBeNull();
  expect(out).toStrictEqual(slow.output as never);
  expect(JSON.stringify(out)).toBe(JSON.stringify(slow.output));
}

/** expectSameVerdict over every variant of `full()`; returns how many `fast` rejected (the table must reach invalid inputs) */
export function expectSameVerdicts(
  schema: v.GenericSchema,
  fast: (raw: Record<string, unknown>) => unknown,
  full: () => object,
  replacements: readonly unknown[],
): number {
  let rejected = 0;
  for (const raw of variants(full, replacements)) {
    expectSameVerdict(schema, fast, raw);
    if (!fast(raw)) rejected++;
  }
  return rejected;
}

/**
 * What the fast path takes as it is, the shape-and-read path (objects.ts,
 * read.ts) reads to the same object with nothing to say: a well-formed
 * object needs no reading. Returns how many variants the fast path took.
 */
export function expectReadAgrees<T>(
  shape: v.GenericSchema,
  read: (o: T) => { object: T; notes: unknown[] } | { drop: unknown },
  fast: (raw: Record<string, unknown>) => unknown,
  full: () => object,
  replacements: readonly unknown[],
): number {
  let taken = 0;
  for (const raw of variants(full, replacements)) {
    const out = fast(raw);
    if (!out) continue;
    taken++;
    const shaped = v.safeParse(shape, raw, { abortPipeEarly: true });
    expect(shaped.success).toBe(true);
    const r = read(shaped.output as T);
    expect(r).toEqual({ object: out as T, notes: [] });
  }
  return taken;
}
