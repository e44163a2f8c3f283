// Partial sync: remembers, per family and per service, what was rendered, and
// turns a set of changed services into the smallest transaction: new or
// different chains (flushed and rewritten), map/set element adds and
// deletes, and stale chains and sets removed after every reference to them.
// Unchanged chains are not sent at all, and most services have none of their
// own (their cluster IPs go to chains shared by endpoint count, names.ts),
// so an endpoint change costs the same at 10 or 10,000 services; endpoints
// keep their dispatch positions (positions.ts), so replacing 100 endpoints of
// a service writes ~200 elements whether it has 500 or 5,000.
//
// A full sync is the same diff from an empty record, in one atomic
// transaction that first clears what the kernel held (a previous run, a
// half-known state after a failure, someone else's edits): rewrite-in-place.ts rewrites
// the tables in place, keeping the affinity sets packets filled. When what
// the tables hold is unknown (dry-run, the listing failed, or the last such
// sync was refused), the tables are deleted and re-created instead, in the
// same transaction: replaced at once, without a window where services are
// missing, but affinity starts over.

import type { Config, NodeState, ServiceEndpoints, StateChange, UdpFrontend } from "../../src/host/toolkit/index.ts";
import { FAMILIES, MAX_SLOTS, type TableFamily } from "./names.ts";
import { dispatchChainSpec, familyConfig, renderBase, type FamilyConfig } from "./render-base.ts";
import { ElementStore } from "./elements.ts";
import { clearHeld, type Holdings } from "./rewrite-in-place.ts";
import { programmedTable, type ProgrammedTable } from "./programmed.ts";
import { NOTHING, renderService, type RuleChainSpec, type ServiceObjects } from "./render-service.ts";
import { Transaction, type Op, type SetSpec } from "./transaction.ts";

/** The phases of a transaction, in the order nft needs them: things exist before they are referenced, and stop being referenced before they go. */
class Phases {
  /** chains that refer to a set being redefined, flushed so that the set can go */
  unref: Op[] = [];
  /** sets deleted to be added again with another definition (addSets) */
  redefine: Op[] = [];
  addSets: Op[] = [];
  addChains: Op[] = [];
  rules: Op[] = [];
  delElements: Op[] = [];
  addElements: Op[] = [];
  delChains: Op[] = [];
  delSets: Op[] = [];
  all(): Op[] {
    return [
      ...this.unref,
      ...this.redefine,
      ...this.addSets,
      ...this.addChains,
      ...this.rules,
      ...this.delElements,
      ...this.addElements,
      ...this.delChains,
      ...this.delSets,
    ];
  }
}

/** Hands out dispatch slots (names.ts), reusing freed ones last-in first-out: deterministic for a given history. */
class Slots {
  private next = 0;
  private free: number[] = [];
  take(): number | undefined {
    if (this.free.length) return this.free.pop();
    return this.next < MAX_SLOTS ? this.next++ : undefined;
  }
  release(slot: number) {
    this.free.push(slot);
  }
}

class FamilySync {
  readonly fc: FamilyConfig;
  private records = new Map<string, ServiceObjects>();
  private elements = new ElementStore();
  private slots = new Slots();
  /**
   * Shard maps created so far. A shard map is created when a slot first needs
   * it and then stays (empty at worst) until the next full sync: deleting it
   * when its last slot goes would make the cost of a change depend on what
   * else shares the shard.
   */
  private created = new Map<string, SetSpec>();
  /**
   * Shared dispatch chains (names.dispatchChain) and how many service ports
   * use each: one exists exactly while it has users, so a series of partial
   * syncs leaves what a full sync of the same state writes.
   */
  private shared = new Map<string, { chain: RuleChainSpec; users: number; written: boolean }>();
  truncated = 0;
  /** `add table`, with its comment, and the base objects (render-base.ts): the same ops at every full sync, so a first load's base sent ahead is known by them (NftSync.firstLoadBase) */
  readonly table: Extract<Op, { kind: "table" }>;
  readonly base: readonly Op[];

  constructor(config: Config, family: TableFamily) {
    this.fc = familyConfig(config, family);
    this.table = { kind: "table", verb: "add", family, comment: TABLE_COMMENT };
    this.base = renderBase(this.fc);
  }

  reset() {
    this.records.clear();
    this.elements.clear();
    this.slots = new Slots();
    this.created.clear();
    this.shared.clear();
  }

  /**
   * diff the given services (absent: deleted) against their records, updating the records;
   * adds the UDP frontends of those services, as recorded now, to `udp`
   */
  plan(services: readonly [string, ServiceEndpoints | undefined][], p: Phases, udp: Map<string, UdpFrontend[]>) {
    const sharedTouched = new Set<string>();
    // a full sync starts from no record: no lookups then
    const none = this.records.size === 0;
    for (const [key, se] of services) {
      const old = none ? undefined : this.records.get(key);
      const oldSlots = old?.slots;
      const next = se
        ? renderService(key, se.service, se.endpoints, this.fc, (c) => oldSlots?.get(c) ?? this.slots.take(), old)
        : undefined;
      // not served in this family, and not before either (the other family of a single-stack service): nothing to diff or claim
      if (next === NOTHING && !old) continue;
      if (next && (next.chains.length || next.elements.length || next.lists.length)) {
        this.records.set(key, next);
        if (next.udp.length) {
          const other = udp.get(key);
          udp.set(key, other ? [...other, ...next.udp] : next.udp);
        }
      } else if (old) this.records.delete(key);
      if (oldSlots) for (const [c, slot] of oldSlots) if (next?.slots.get(c) !== slot) this.slots.release(slot);
      this.truncated += next?.truncated ?? 0;
      this.diffObjects(old, next, p);
      for (const c of old?.shared ?? []) {
        this.shared.get(c.name)!.users--;
        sharedTouched.add(c.name);
      }
      for (const c of next?.shared ?? []) {
        let s = this.shared.get(c.name);
        if (!s)
          this.shared.set(c.name, (s = { chain: dispatchChainSpec(this.fc.family, c.proto, c.index, c.n), users: 0, written: false }));
        s.users++;
        sharedTouched.add(c.name);
      }
      // unclaims first: a key may pass from one element object to another
      if (old) for (const e of old.elements) this.elements.unclaim(e.set, e.key, key);
      if (old) for (const l of old.lists) if (l) this.elements.unclaimList(l);
      if (next) for (const e of next.elements) this.elements.claim(e.set, e);
      if (next) for (const l of next.lists) if (l) this.elements.claimList(l);
    }
    this.settleShared(sharedTouched, p);
    const f = this.fc.family;
    for (const c of this.elements.settle()) {
      if (c.removes.length) p.delElements.push({ kind: "elements", verb: "delete", family: f, set: c.set, items: c.removes });
      if (c.adds.length) p.addElements.push({ kind: "elements", verb: "add", family: f, set: c.set, items: c.adds });
    }
  }

  /** what this family's records say its table holds (programmed.ts), for `verify` */
  programmed(normalize: (key: string) => string): ProgrammedTable {
    const { family } = this.fc;
    return programmedTable({ family, base: this.base, records: this.records, created: this.created, shared: this.shared }, normalize);
  }

  /** shard maps, sets and chains of one service: what to create, rewrite and delete */
  private diffObjects(old: ServiceObjects | undefined, next: ServiceObjects | undefined, p: Phases) {
    const f = this.fc.family;
    for (const m of next?.maps ?? [])
      if (!this.created.has(m.name)) {
        this.created.set(m.name, m);
        p.addSets.push({ kind: "map", verb: "add", family: f, set: m });
      }
    // Most services have neither sets nor chains of their own: no lookups built for them.
    let flushed: Set<string> | undefined;
    if (old?.sets.length || next?.sets.length) {
      const oldSets = new Map(old?.sets.map((s) => [s.name, s]));
      const newSets = new Set(next?.sets.map((s) => s.name));
      for (const s of next?.sets ?? []) {
        const before = oldSets.get(s.name);
        if (before && sameSetSpec(before, s)) continue;
        // Another definition (a new affinity timeout): `add set` over the
        // existing set changes its timeout on Linux 6.18 but not on every
        // kernel, so it is re-created; the kernel refuses to delete a set a
        // rule still refers to, so the chains that use it are emptied first
        // and written again after it (the full sync in place does the same).
        if (before) {
          for (const c of old!.chains)
            if (!flushed?.has(c.name) && c.rules.some((r) => r.rule.includes(`@${s.name} `) || r.rule.endsWith(`@${s.name}`))) {
              (flushed ??= new Set()).add(c.name);
              p.unref.push({ kind: "chain", verb: "flush", family: f, name: c.name });
            }
          p.redefine.push({ kind: "set", verb: "delete", family: f, name: s.name });
        }
        p.addSets.push({ kind: "set", verb: "add", family: f, set: s });
      }
      for (const s of old?.sets ?? []) if (!newSets.has(s.name)) p.delSets.push({ kind: "set", verb: "delete", family: f, name: s.name });
    }
    if (!old?.chains.length && !next?.chains.length) return;
    if (!old?.chains.length) {
      // all new (a full sync, or a new service): nothing to compare with
      for (const c of next!.chains) {
        p.addChains.push({ kind: "chain", verb: "add", family: f, chain: { name: c.name } });
        for (const r of c.rules) p.rules.push({ kind: "rule", family: f, chain: c.name, rule: r.rule, comment: r.comment });
      }
      return;
    }
    const oldChains = new Map(old?.chains.map((c) => [c.name, c]));
    const newChains = new Set(next?.chains.map((c) => c.name));
    for (const c of next?.chains ?? []) {
      const before = oldChains.get(c.name);
      if (!before) p.addChains.push({ kind: "chain", verb: "add", family: f, chain: { name: c.name } });
      else if (flushed?.has(c.name)) {
        // emptied above: written whole
      } else if (sameRules(before, c)) continue;
      else p.rules.push({ kind: "chain", verb: "flush", family: f, name: c.name });
      for (const r of c.rules) p.rules.push({ kind: "rule", family: f, chain: c.name, rule: r.rule, comment: r.comment });
    }
    const doomed = old?.chains.filter((c) => !newChains.has(c.name)) ?? [];
    for (const name of deletionOrder(doomed)) p.delChains.push({ kind: "chain", verb: "delete", family: f, name });
  }

  /** creates the shared dispatch chains that got their first user, deletes those that lost their last */
  private settleShared(touched: Set<string>, p: Phases) {
    const f = this.fc.family;
    for (const name of touched) {
      const s = this.shared.get(name)!;
      if (s.users && !s.written) {
        s.written = true;
        p.addChains.push({ kind: "chain", verb: "add", family: f, chain: { name } });
        for (const r of s.chain.rules) p.rules.push({ kind: "rule", family: f, chain: name, rule: r.rule, comment: r.comment });
      } else if (!s.users) {
        if (s.written) p.delChains.push({ kind: "chain", verb: "delete", family: f, name });
        this.shared.delete(name);
      }
    }
  }
}

/**
 * The names of `chains`, each before every chain of the list it jumps or goes
 * to: the kernel refuses to delete a chain that a rule still refers to (EBUSY,
 * failing the whole transaction), and a service's chains refer to each other
 * (an eTP=Local external chain goes to the cluster chain, dispatch rules go to
 * endpoint chains). Rules of chains that stay were rewritten earlier in the
 * transaction, and map elements deleted, so only these references remain.
 */
export function deletionOrder(chains: readonly RuleChainSpec[]): string[] {
  if (chains.length < 2) return chains.map((c) => c.name);
  const byName = new Map(chains.map((c) => [c.name, c]));
  const out: string[] = [];
  const seen = new Set<string>();
  // post-order: what a chain refers to lands before it; reversed below
  const visit = (c: RuleChainSpec) => {
    if (seen.has(c.name)) return;
    seen.add(c.name);
    for (const r of c.rules)
      for (const m of r.rule.matchAll(CHAIN_REF)) {
        const target = byName.get(m[1]);
        if (target) visit(target);
      }
    out.push(c.name);
  };
  for (const c of chains) visit(c);
  return out.reverse();
}
const CHAIN_REF = /\b(?:goto|jump) (\S+)/g;

const sameSetSpec = (a: SetSpec, b: SetSpec) =>
  a.type === b.type && a.timeout === b.timeout && a.typeOf === b.typeOf && String(a.flags) === String(b.flags);

const sameRules = (a: RuleChainSpec, b: RuleChainSpec) =>
  a.rules.length === b.rules.length && a.rules.every((r, i) => r.rule === b.rules[i].rule && r.comment === b.rules[i].comment);

export interface SyncPlan {
  tx: Transaction;
  full: boolean;
  /** a full sync over tables that held no chain, set or map (a first start, or after someone deleted them) */
  fresh: boolean;
  /** the services this plan rendered (every known one on a full sync) */
  keys: string[];
  /** UDP frontends of those services once the plan is applied (absent = none) */
  udp: Map<string, UdpFrontend[]>;
  /** endpoints left out of over-long dispatch lists (names.MAX_DISPATCH) */
  truncated: number;
}

/** What `NftSync.render` made, for `finish` */
export interface RenderedServices {
  full: boolean;
  phases: Phases;
  keys: string[];
  udp: Map<string, UdpFrontend[]>;
  truncated: number;
}

export class NftSync {
  private families: FamilySync[];
  /** the last plan was a full sync, and no reset (its failure) followed yet: whether it was in place */
  private fullOutstanding: { inPlace: boolean } | undefined;
  /** a full sync in place was refused: the next one replaces the tables whole */
  private inPlaceFailed = false;

  constructor(config: Config) {
    this.families = FAMILIES.map((f) => new FamilySync(config, f));
  }

  /** Forget everything: the next plan must be full (after a failed apply the kernel state is unknown). */
  reset() {
    // Whatever made an in-place sync fail (a listing gone stale, a kernel
    // quirk with an object kept), replacing the tables whole cannot hit it.
    if (this.fullOutstanding?.inPlace) this.inPlaceFailed = true;
    this.fullOutstanding = undefined;
    this.forget();
  }

  private forget() {
    for (const fs of this.families) fs.reset();
  }

  /** what the last plan (once applied) put in each family's table, for `verify` (programmed.ts) */
  programmed(normalize: (key: string) => string): ProgrammedTable[] {
    return this.families.map((fs) => fs.programmed(normalize));
  }

  /**
   * `held`: what kpng's tables hold (rewrite-in-place.ts), for a full sync in place;
   * without it a full sync deletes and re-creates them.
   */
  plan(state: NodeState, change: StateChange, held?: Holdings): SyncPlan {
    return this.finish(this.render(state, change), held);
  }

  /**
   * A plan's services, rendered: most of a plan's work, and none of it
   * needs what the tables hold, so a full sync lists them (rewrite-in-place.ts, another
   * process) while this runs. Records are updated here: `finish` must follow.
   */
  render(state: NodeState, change: StateChange): RenderedServices {
    const full = change === null;
    // a plan after a full sync, without a reset between: that sync was applied
    if (this.fullOutstanding) this.inPlaceFailed = false;
    this.fullOutstanding = undefined;
    // each service looked up once, for both families
    // keys sorted by the native string order (what byKey compares): no call into JS per comparison, and
    // a full sync sorts every service key in code that runs cold
    const services: [string, ServiceEndpoints | undefined][] = (full ? [...state.services.keys()] : [...change])
      .sort()
      .map((k) => [k, state.services.get(k)]);
    if (full) this.forget();
    const phases = new Phases();
    const byFamily = new Map<string, UdpFrontend[]>();
    for (const fs of this.families) {
      fs.truncated = 0;
      fs.plan(services, phases, byFamily);
    }
    return {
      full,
      phases,
      keys: services.map(([k]) => k),
      // in key order, as the services (the second family may add keys after the first's)
      udp: new Map([...byFamily].sort(byKey)),
      truncated: this.families.reduce((n, fs) => n + fs.truncated, 0),
    };
  }

  /**
   * The part of a full sync into tables that do not exist yet that needs no
   * service: both tables and their base objects, which a first load sends
   * while the services render (executor.ts). It creates the tables (`create`
   * fails if either exists, committing nothing: a table that appeared since
   * kpng looked is never written twice), and stands for the ops `covers` of
   * the full sync's transaction (`finish` with tables holding nothing).
   * Undefined when that sync would not be in place (its last one was refused).
   */
  firstLoadBase(): { tx: Transaction; covers: ReadonlySet<Op> } | undefined {
    if (this.inPlaceFailed) return undefined;
    const tx = new Transaction();
    const covers = new Set<Op>();
    for (const fs of this.families) {
      tx.add({ ...fs.table, verb: "create" });
      covers.add(fs.table);
      for (const op of fs.base) {
        tx.add(op);
        covers.add(op);
      }
    }
    return { tx, covers };
  }

  /**
   * What a full sync of no service that re-creates the tables sends (`plan` of an empty state, without
   * its bookkeeping): the skeleton setup has the kernel validate. Changes nothing here.
   */
  emptyFullSync(): Transaction {
    const tx = new Transaction();
    for (const fs of this.families) {
      recreateTable(tx, fs);
      for (const op of fs.base) tx.add(op);
    }
    return tx;
  }

  /** The transaction of rendered services; a full sync's first clears what the tables hold (`held`, as in `plan`). */
  finish(rendered: RenderedServices, held?: Holdings): SyncPlan {
    const { full, phases: p, keys, udp, truncated } = rendered;
    const tx = new Transaction();
    const inPlace = full && held !== undefined && !this.inPlaceFailed;
    if (full) {
      for (const fs of this.families) {
        const { family } = fs.fc;
        if (inPlace) {
          tx.add(fs.table);
          for (const op of clearHeld(family, held[family], [...fs.base, ...p.addSets, ...p.addChains])) tx.add(op);
        } else recreateTable(tx, fs);
        for (const op of fs.base) tx.add(op);
      }
      this.fullOutstanding = { inPlace };
    }
    for (const op of p.all()) tx.add(op);
    const fresh = inPlace && FAMILIES.every((f) => !held[f].chains.size && !held[f].sets.size);
    return { tx, full, fresh, keys, udp, truncated };
  }
}

/** the family's table deleted (`add` first: deleting a table that is not there fails) and added again, empty */
function recreateTable(tx: Transaction, fs: FamilySync) {
  const { family } = fs.fc;
  tx.add({ kind: "table", verb: "add", family });
  tx.add({ kind: "table", verb: "delete", family });
  tx.add(fs.table);
}

const byKey = (a: [string, unknown], b: [string, unknown]) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0);

const TABLE_COMMENT = "rules for kpng, the Kubernetes service proxy";

/** Removes both tables (and with them every chain, map and set kpng made). */
export function cleanupTransaction(): Transaction {
  const tx = new Transaction();
  for (const family of FAMILIES) {
    tx.add({ kind: "table", verb: "add", family });
    tx.add({ kind: "table", verb: "delete", family });
  }
  return tx;
}
