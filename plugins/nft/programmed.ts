// What the nft backend last programmed into one family's table, as objects
// `verify` compares with the kernel (verify.ts): every chain with its rules,
// every set and map with the elements kpng wrote, each with the Service that
// owns it ("" for the base objects and what Services share). Built from the
// sync's own records (plan.ts: the base ops of a full sync, each Service's
// rendered objects, the shard maps created, the shared dispatch chains), not
// by rendering again: slots and dispatch positions depend on the history of
// syncs (names.ts, positions.ts), and a fresh render would place them
// elsewhere.

import { comment, SYNC_STAMP_SET, type TableFamily } from "./names.ts";
import { listElements, type RuleChainSpec, type RuleSpec, type ServiceObjects } from "./render-service.ts";
import type { Op, SetSpec } from "./transaction.ts";

export interface ProgrammedElement {
  /** as rendered (normalized for comparison by verify.ts) */
  key: string;
  value?: string;
  comment?: string;
  /** the Service key, "" for a base element */
  owner: string;
}

export interface ProgrammedSet {
  kind: "set" | "map";
  owner: string;
  /** as declared: how its elements' bytes read (netlink-dump.ts) */
  spec: SetSpec;
  /** by normalized key; undefined for a set whose elements kpng does not write (packets fill affinity sets) */
  elements?: Map<string, ProgrammedElement>;
}

export interface ProgrammedChain {
  owner: string;
  rules: RuleSpec[];
}

export interface ProgrammedTable {
  family: TableFamily;
  chains: Map<string, ProgrammedChain>;
  sets: Map<string, ProgrammedSet>;
}

/** what a family's sync holds (plan.ts FamilySync) */
export interface FamilyRecords {
  family: TableFamily;
  base: readonly Op[];
  records: ReadonlyMap<string, ServiceObjects>;
  /** shard maps created since the last full sync (they stay, empty at worst) */
  created: ReadonlyMap<string, SetSpec>;
  shared: ReadonlyMap<string, { chain: RuleChainSpec; written: boolean }>;
}

/**
 * The table kpng's records say the kernel holds. `normalize` turns element
 * keys into the form the comparison uses (one key spelled two ways is one key).
 * A key claimed by two Services goes to the lowest Service key, as the
 * element store settles it (elements.ts).
 */
export function programmedTable(r: FamilyRecords, normalize: (key: string) => string): ProgrammedTable {
  const t: ProgrammedTable = { family: r.family, chains: new Map(), sets: new Map() };
  const addElement = (set: string, e: ProgrammedElement) => {
    const elements = t.sets.get(set)?.elements;
    if (!elements) return;
    const k = normalize(e.key);
    const had = elements.get(k);
    if (!had || e.owner < had.owner) elements.set(k, e);
  };
  for (const op of r.base) {
    if (op.kind === "chain" && op.verb === "add") t.chains.set(op.chain.name, { owner: "", rules: [] });
    else if (op.kind === "rule") t.chains.get(op.chain)?.rules.push({ rule: op.rule, comment: op.comment });
    else if ((op.kind === "set" || op.kind === "map") && op.verb === "add")
      t.sets.set(op.set.name, { kind: op.kind, owner: "", spec: op.set, elements: new Map() });
    else if (op.kind === "elements" && op.verb === "add") for (const e of op.items) addElement(op.set, { ...e, owner: "" });
  }
  for (const [name, spec] of r.created) t.sets.set(name, { kind: "map", owner: "", spec, elements: new Map() });
  for (const [name, s] of r.shared) if (s.written) t.chains.set(name, { owner: "", rules: s.chain.rules });
  for (const [key, o] of r.records) {
    for (const c of o.chains) t.chains.set(c.name, { owner: key, rules: c.rules });
    // a Service's own sets are its affinity sets: packets write their elements
    for (const s of o.sets) t.sets.set(s.name, { kind: "set", owner: key, spec: s });
  }
  for (const o of r.records.values()) {
    for (const e of o.elements) addElement(e.set, e);
    for (const l of o.lists) if (l) for (const e of listElements(l)) addElement(e.set, e);
  }
  // every transaction rewrites the stamp (watch.ts): its element says nothing of the rules
  t.sets.delete(SYNC_STAMP_SET);
  return t;
}

/** the comment the kernel holds for a rule or element kpng wrote with `text` (printed through names.comment) */
export const kernelComment = (text: string | undefined) => (text === undefined ? "" : comment(text));
