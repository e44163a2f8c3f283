// What kpng's tables hold before a full sync, read back from the kernel, so
// the full sync rewrites the tables in place instead of deleting and
// re-creating them: the dynamic sets that packets fill (ClientIP affinity:
// which endpoint each client was sent to) keep their elements across a
// restart of kpng, a repair and a failed sync, as upstream kube-proxy's
// nftables mode keeps its affinity sets (it `add`s them, which keeps their
// elements, and deletes only the stale ones it finds in `nft list sets`).
//
// Everything else is rewritten whatever it holds — kpng's own older rules, a
// half-flushed table, someone else's rules, chains or sets in kpng's table:
// every chain is flushed (its rules may reference any set or chain), every
// set and map is deleted and added again (an `add` of an existing set with
// another key type or flags fails, and a set's elements are all re-sent
// anyway), and the chains the sync does not want, or wants with another
// hook, priority or policy, are deleted. All of it in the sync's one
// transaction, before the sync's own statements.
//
// Only chains, sets and maps are listed: `nft list table` would print every
// rule too (nft 1.0.6: far slower than these three listings at scale with
// affinity; bench nft prints the listing time). Other objects someone adds to
// kpng's table (counters, quotas, flowtables) stay; no rule of kpng's uses
// them, and the flush removed any rule that did.

import * as v from "valibot";
import type { Executor } from "../../src/host/toolkit/index.ts";
import { FAMILIES, TABLE, type TableFamily } from "./names.ts";
import type { ChainSpec, Op, SetSpec } from "./transaction.ts";

export interface HeldChain {
  /** hook, type, priority and policy of a base chain; absent for a regular chain */
  base?: { type: string; hook: string; prio: number; policy: string };
}

export interface HeldSet {
  kind: "set" | "map";
  /** the key type as `nft` prints it, parts joined by " . " */
  type: string;
  /** without "dynamic" (nft 1.0.6 leaves it out of its JSON) */
  flags: string[];
  /** seconds */
  timeout?: number;
}

/** one table's chains, sets and maps by name (empty when the table does not exist) */
export interface TableHoldings {
  chains: Map<string, HeldChain>;
  sets: Map<string, HeldSet>;
}

export type Holdings = Record<TableFamily, TableHoldings>;

/**
 * `-t`: no set elements (100,000s at scale). No family: one listing covers
 * both of kpng's tables (other tables' objects are skipped).
 */
export const LISTINGS: readonly (readonly string[])[] = [
  ["nft", "-t", "-j", "list", "chains"],
  ["nft", "-t", "-j", "list", "sets"],
  ["nft", "-t", "-j", "list", "maps"],
];

/** Reads what kpng's tables hold. Fails when nft fails or prints something unexpected. */
export async function listHoldings(exec: Executor): Promise<Holdings> {
  return parseHoldings(await Promise.all(LISTINGS.map((argv) => exec.run([...argv]))));
}

const Listing = v.object({ nftables: v.array(v.record(v.string(), v.unknown())) });
const Named = v.object({ family: v.string(), table: v.string(), name: v.string() });
const Chain = v.object({
  ...Named.entries,
  type: v.optional(v.string()),
  hook: v.optional(v.string()),
  prio: v.optional(v.number()),
  policy: v.optional(v.string()),
});
const oneOrMore = v.pipe(
  v.union([v.string(), v.array(v.string())]),
  v.transform((x) => (typeof x === "string" ? [x] : x)),
);
const Set_ = v.object({
  ...Named.entries,
  type: oneOrMore,
  flags: v.optional(oneOrMore),
  timeout: v.optional(v.number()),
});

/** The outputs of LISTINGS (JSON of `nft -j list chains|sets|maps`), kpng's objects by family. */
export function parseHoldings(outputs: string[]): Holdings {
  const held = Object.fromEntries(FAMILIES.map((f) => [f, { chains: new Map(), sets: new Map() }])) as Holdings;
  const ours = (x: { family: string; table: string }) =>
    x.table === TABLE && (FAMILIES as readonly string[]).includes(x.family) ? held[x.family as TableFamily] : undefined;
  for (const out of outputs) {
    const listing = v.safeParse(Listing, JSON.parse(out));
    if (!listing.success) throw new Error(`nft -j list: unexpected output: ${v.summarize(listing.issues)}`);
    for (const item of listing.output.nftables) {
      if (item.chain) {
        const c = v.parse(Chain, item.chain);
        const t = ours(c);
        if (!t) continue;
        const base =
          c.hook !== undefined ? { type: c.type ?? "", hook: c.hook, prio: c.prio ?? NaN, policy: c.policy ?? "accept" } : undefined;
        t.chains.set(c.name, { base });
      }
      for (const kind of ["set", "map"] as const) {
        if (!item[kind]) continue;
        const s = v.parse(Set_, item[kind]);
        const t = ours(s);
        if (!t) continue;
        t.sets.set(s.name, { kind, type: s.type.join(" . "), flags: withoutDynamic(s.flags ?? []), timeout: s.timeout });
      }
    }
  }
  return held;
}

const withoutDynamic = (flags: readonly string[]) => flags.filter((f) => f !== "dynamic").sort();

/**
 * The statements that open a full sync of `family` over what its table
 * holds (after `add table`), given the sync's own statements `adds`: every
 * chain flushed; every set and map deleted but the dynamic sets `adds`
 * creates again with the same definition (kept) and the interval sets it
 * creates again as they are (flushed); every chain `adds` does not create as
 * it is, deleted.
 */
export function clearHeld(family: TableFamily, held: TableHoldings, adds: readonly Op[]): Op[] {
  const chains = new Map<string, ChainSpec>();
  const sets = new Map<string, { kind: "set" | "map"; set: SetSpec }>();
  for (const op of adds) {
    if (op.kind === "chain" && op.verb === "add" && op.family === family) chains.set(op.chain.name, op.chain);
    if ((op.kind === "set" || op.kind === "map") && op.verb === "add" && op.family === family)
      sets.set(op.set.name, { kind: op.kind, set: op.set });
  }
  const out: Op[] = [];
  for (const name of held.chains.keys()) out.push({ kind: "chain", verb: "flush", family, name });
  for (const [name, s] of held.sets) {
    const want = sets.get(name);
    if (keeps(s, want)) continue;
    out.push({ kind: s.kind, verb: refills(s, want) ? "flush" : "delete", family, name });
  }
  for (const [name, c] of held.chains) {
    const want = chains.get(name);
    if (!want || !sameChain(c, want)) out.push({ kind: "chain", verb: "delete", family, name });
  }
  return out;
}

type WantedSet = { kind: "set" | "map"; set: SetSpec } | undefined;

/** a set whose elements only packets write, wanted again as it is */
const keeps = (held: HeldSet, want: WantedSet) => sameSet(held, want, "dynamic");

/** a plain set (not a map, not `typeof`) with flag `flag`, wanted again with held's type, flags and timeout */
function sameSet(held: HeldSet, want: WantedSet, flag: string): boolean {
  if (want?.kind !== "set" || held.kind !== "set" || want.set.typeOf || !want.set.flags?.includes(flag)) return false;
  const flags = withoutDynamic(want.set.flags);
  return (
    held.type === want.set.type &&
    held.timeout === want.set.timeout &&
    held.flags.length === flags.length &&
    held.flags.every((f, i) => f === flags[i])
  );
}

/**
 * An interval set (nodeport-ips) wanted again as it is: flushed and refilled,
 * not deleted and added. Deleted and added in one transaction, it was empty
 * to packets for a moment at the commit on Linux 6.18 (the new generation's
 * rules saw the new set before its elements were published): a connect to a
 * node port was refused in some restarts, often enough for test/deployed to
 * catch it. Flushed, it serves its old elements until the commit publishes
 * the new ones.
 */
const refills = (held: HeldSet, want: WantedSet) => sameSet(held, want, "interval");

function sameChain(held: HeldChain, want: ChainSpec): boolean {
  const b = want.base;
  if (!b || !held.base) return !b && !held.base;
  return held.base.type === b.type && held.base.hook === b.hook && held.base.prio === Number(b.priority) && held.base.policy === "accept";
}
