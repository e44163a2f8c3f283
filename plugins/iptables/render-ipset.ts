// The hairpin ipsets (names.ts, hairpinSets) as `ipset restore` input. Pure.
// Several services may DNAT to the same endpoint address and port, so a
// member stays while any service holds it: `HairpinMembers` counts holders
// and turns per-service changes into the adds and deletes the set needs.

import type { Family } from "../../src/host/toolkit/index.ts";
import { hairpinSets } from "./names.ts";

/** A set holds up to this many members (ipset's default, 65,536, is below 10,000 services x 10 endpoints). */
export const hairpinMaxElem = 1 << 20;

const create = (name: string, family: Family) =>
  `create ${name} hash:ip,port,ip family ${family === "v4" ? "inet" : "inet6"} maxelem ${hairpinMaxElem} -exist`;

/** Makes sure the family's set exists (a restore whose rule names it fails otherwise). */
export const ipsetCreate = (family: Family) => create(hairpinSets[family], family) + "\n";

/**
 * Replaces the family's set with exactly `members`, atomically: filled under
 * a temporary name, then swapped in (rules keep matching the old content
 * until then). A set of 100,000 members takes a while to fill, so a full
 * sync runs it beside the iptables restore.
 */
export function ipsetFull(family: Family, members: Iterable<string>): string {
  const name = hairpinSets[family];
  const tmp = `${name}-NEW`;
  const out = [create(name, family), create(tmp, family), `flush ${tmp}`];
  for (const m of members) out.push(`add ${tmp} ${m}`);
  out.push(`swap ${tmp} ${name}`, `destroy ${tmp}`);
  return out.join("\n") + "\n";
}

/** Adds and deletes in the family's set; "" when there are none. */
export function ipsetEdits(family: Family, adds: Iterable<string>, deletes: Iterable<string>): string {
  const name = hairpinSets[family];
  const out: string[] = [];
  for (const m of adds) out.push(`add ${name} ${m} -exist`);
  for (const m of deletes) out.push(`del ${name} ${m} -exist`);
  return out.length ? out.join("\n") + "\n" : "";
}

/** How many services hold each member of one family's set. */
export class HairpinMembers {
  private counts = new Map<string, number>();

  /** The members that appear (count 0 -> 1) and disappear (1 -> 0) if services change from `before` to `after`; nothing is recorded. */
  edits(changes: Iterable<{ before?: ReadonlySet<string>; after?: ReadonlySet<string> }>): {
    adds: string[];
    deletes: string[];
    next: Map<string, number>;
  } {
    const delta = new Map<string, number>();
    for (const { before, after } of changes) {
      for (const m of before ?? []) if (!after?.has(m)) delta.set(m, (delta.get(m) ?? 0) - 1);
      for (const m of after ?? []) if (!before?.has(m)) delta.set(m, (delta.get(m) ?? 0) + 1);
    }
    const adds: string[] = [];
    const deletes: string[] = [];
    const next = new Map<string, number>();
    for (const [m, d] of delta) {
      if (d === 0) continue;
      const was = this.counts.get(m) ?? 0;
      const now = was + d;
      next.set(m, now);
      if (was === 0 && now > 0) adds.push(m);
      if (was > 0 && now <= 0) deletes.push(m);
    }
    return { adds, deletes, next };
  }

  /** Records counts that `edits` computed, once they are applied. */
  apply(next: Map<string, number>) {
    for (const [m, n] of next) {
      if (n > 0) this.counts.set(m, n);
      else this.counts.delete(m);
    }
  }

  /** Starts over from every service's members (a full sync). */
  reset(all: Iterable<ReadonlySet<string>>) {
    this.counts.clear();
    for (const set of all) for (const m of set) this.counts.set(m, (this.counts.get(m) ?? 0) + 1);
  }

  members(): IterableIterator<string> {
    return this.counts.keys();
  }
}
