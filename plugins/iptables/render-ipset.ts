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
  const out = [fullHead(family)];
  for (const m of members) out.push(fullAdd(family, m));
  out.push(fullTail(family));
  return out.join("");
}

const tmpSet = (family: Family) => `${hairpinSets[family]}-NEW`;
/** ipsetFull's lines before the members: both sets made, the temporary one emptied */
const fullHead = (family: Family) => `${create(hairpinSets[family], family)}\n${create(tmpSet(family), family)}\nflush ${tmpSet(family)}\n`;
const fullAdd = (family: Family, member: string) => `add ${tmpSet(family)} ${member}\n`;
/** ipsetFull's lines after the members: the filled set swapped in */
const fullTail = (family: Family) => `swap ${tmpSet(family)} ${hairpinSets[family]}\ndestroy ${tmpSet(family)}\n`;

/** services whose new members go to `ipset` in one piece of a streamed fill (~1,000 lines) */
export const FILL_BATCH = 100;

/**
 * ipsetFull's input built while the services render (the first sync,
 * streamed): each service's members counted and printed as it renders,
 * instead of all of them once the last has rendered (100,000 members at
 * 10,000 services), which held back the restore's last piece, its COMMIT.
 * `chunks` is a fixed list (so a reader taking them all at once gets an
 * end): the sets made, then one promise per FILL_BATCH services, resolved
 * as they render, the last one with the swap; a reader may start before
 * the render ends. The text joined is ipsetFull's for the same members in
 * the same order.
 */
export class StreamedFill {
  readonly members = new HairpinMembers();
  readonly chunks: (string | Promise<string>)[];
  private readonly later: PromiseWithResolvers<string>[];
  private lines = "";
  private rendered = 0;
  private sent = 0;

  /** `services`: how many are to render (at most; a batch is sent every FILL_BATCH of them) */
  constructor(
    private readonly family: Family,
    services: number,
  ) {
    this.later = Array.from({ length: Math.ceil(services / FILL_BATCH) + 1 }, () => Promise.withResolvers<string>());
    this.chunks = [fullHead(family), ...this.later.map((l) => l.promise)];
  }

  /** one rendered service's members */
  add(members: ReadonlySet<string>) {
    for (const m of this.members.add(members)) this.lines += fullAdd(this.family, m);
    if (++this.rendered % FILL_BATCH === 0 && this.sent < this.later.length - 1) this.send();
  }

  /** every service rendered (or the render given up): the rest, then the swap; again: nothing */
  end() {
    if (this.sent === this.later.length) return;
    while (this.sent < this.later.length - 1) this.send();
    this.lines += fullTail(this.family);
    this.send();
  }

  private send() {
    this.later[this.sent++].resolve(this.lines);
    this.lines = "";
  }
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
    for (const set of all) this.add(set);
  }

  /** Counts one more holder of each of `set`: the members new to the set (a full sync's, as each service renders). */
  add(set: ReadonlySet<string>): string[] {
    const fresh: string[] = [];
    for (const m of set) {
      const n = this.counts.get(m) ?? 0;
      this.counts.set(m, n + 1);
      if (n === 0) fresh.push(m);
    }
    return fresh;
  }

  members(): IterableIterator<string> {
    return this.counts.keys();
  }
}
