// Turns rendered rules into one transaction per family: a full restore
// (every kpng chain declared and rewritten, leftovers deleted, missing
// built-in jumps inserted) or a partial one (only the chains of changed
// services whose content differs, plus single-rule edits in the fixed
// chains). Pure.

import { baseJumps, fixedChains, insertAtHead, tables, type Table } from "./names.ts";
import type { FixedRules } from "./render-fixed.ts";
import { ruleLine, Transaction, type Rule } from "./render-restore.ts";
import type { OwnedChain, ServiceRules } from "./render-service.ts";
import type { SavedState } from "./parse-save.ts";

/** What was written for one service, compact enough to keep for 10,000s of services. */
export interface WrittenService {
  /** `table/name` -> a 64-bit digest of the chain's rule lines (only equality matters) */
  chains: Map<string, Digest>;
  /** `table/line` -> the rule in a fixed chain */
  shared: Map<string, Rule>;
  /** its members of the hairpin ipset */
  hairpin: ReadonlySet<string>;
  /** how many rules it owns per table (its chains' and its shared ones), for the rule-count metrics */
  rules: Partial<Record<Table, number>>;
}

const chainKey = (table: Table, name: string) => `${table}/${name}`;
const splitKey = (key: string) => {
  const i = key.indexOf("/");
  return { table: key.slice(0, i) as Table, name: key.slice(i + 1) };
};
const sharedKey = (r: Rule) => `${r.table}/${ruleLine(r)}`;

type Digest = number | bigint;
/** A chain's rules printed, once: the digest and the restore input share them. */
const chainLines = (c: OwnedChain): string[] => (c.lines ??= c.rules.map((r) => ruleLine(r)));
const digest = (c: OwnedChain): Digest => Bun.hash(chainLines(c).join("\n"));
const appendChain = (tx: Transaction, c: OwnedChain) => {
  const lines = chainLines(c);
  c.rules.forEach((r, i) => tx.append(r, lines[i]));
};

export function compact(rules: ServiceRules): WrittenService {
  const chains = new Map<string, Digest>();
  const counts: Partial<Record<Table, number>> = {};
  for (const [k, c] of rules.chains) {
    chains.set(k, digest(c));
    counts[c.table] = (counts[c.table] ?? 0) + c.rules.length;
  }
  const shared = new Map<string, Rule>();
  for (const r of rules.shared) {
    shared.set(sharedKey(r), r);
    counts[r.table] = (counts[r.table] ?? 0) + 1;
  }
  return { chains, shared, hairpin: rules.hairpin, rules: counts };
}

const addShared = (tx: Transaction, r: Rule) => (insertAtHead.has(`${r.table}/${r.chain}`) ? tx.insert(r) : tx.append(r));

export interface FullInput {
  fixed: FixedRules;
  services: Iterable<ServiceRules>;
  /** the host's current state; undefined = assume nothing of kpng's exists (dry run) */
  saved?: SavedState;
}

export function fullTransaction(input: FullInput): Transaction {
  const tx = new Transaction();
  for (const _ of fullTransactionSteps(input, tx));
  return tx;
}

/**
 * The full restore built into `tx` a step at a time: one step per service,
 * so that a streamed restore (streamRestore) sends each service's chains as
 * they come. What depends on no service (the fixed chains, the host's
 * duplicate jumps to delete) is added before the first.
 */
export function* fullTransactionSteps({ fixed, services, saved }: FullInput, tx: Transaction): Generator<void, void> {
  const wanted = new Set<string>();
  const declare = (table: Table, name: string) => {
    const k = chainKey(table, name);
    if (wanted.has(k)) return;
    wanted.add(k);
    tx.declare(table, name);
  };
  for (const t of tables) for (const c of fixedChains[t]) declare(t, c);
  for (const c of fixed.chains) declare(c.table, c.name);
  const jumps = [...fixed.jumps, ...baseJumps];

  // Built-in jumps: one of each, inserted at the head (upstream kube-proxy
  // prepends too, so other firewalls' ACCEPTs cannot bypass services).
  const seen = new Set<string>();
  const expected = new Set(jumps.map((j) => `${j.table}/${j.from}/${j.to}`));
  for (const j of saved?.jumps ?? []) {
    const k = `${j.table}/${j.from}/${j.to}`;
    if (expected.has(k) && !seen.has(k)) seen.add(k);
    else tx.removeSaved(j.table, j.line); // a duplicate, or a jump an older kpng made
  }

  const shared: Rule[] = [];
  for (const svc of services) {
    for (const c of svc.chains.values()) {
      declare(c.table, c.name);
      appendChain(tx, c);
    }
    for (const r of svc.shared) shared.push(r);
    yield;
  }
  for (const r of shared) tx.append(r);
  for (const r of fixed.rules) tx.append(r);
  for (const r of fixed.tails) tx.append(r);

  // Reversed: each `-I 1` lands above the previous one, leaving the listed order.
  for (const j of [...jumps].reverse()) {
    if (seen.has(`${j.table}/${j.from}/${j.to}`)) continue;
    tx.insert({ table: j.table, chain: j.from, comment: j.comment, match: j.match, target: ["-j", j.to] });
  }

  for (const [table, names] of saved?.chains ?? []) {
    for (const name of names) {
      if (wanted.has(chainKey(table, name))) continue;
      tx.declare(table, name); // flushed first, so it no longer references anything
      tx.deleteChain(table, name);
    }
  }
}

export interface ServiceChange {
  before?: WrittenService;
  after?: ServiceRules;
}

/** The edits turning `before` into `after` for each changed service; unchanged chains are not named at all. */
export function partialTransaction(changes: Iterable<ServiceChange>): Transaction {
  const tx = new Transaction();
  for (const { before, after } of changes) {
    const afterKeys = new Set<string>();
    for (const [k, c] of after?.chains ?? []) {
      afterKeys.add(k);
      if (before?.chains.get(k) === digest(c)) continue;
      tx.declare(c.table, c.name);
      appendChain(tx, c);
    }
    for (const k of before?.chains.keys() ?? []) {
      if (afterKeys.has(k)) continue;
      const { table, name } = splitKey(k);
      tx.declare(table, name);
      tx.deleteChain(table, name);
    }
    const afterShared = new Map<string, Rule>();
    for (const r of after?.shared ?? []) afterShared.set(sharedKey(r), r);
    for (const [k, r] of before?.shared ?? []) if (!afterShared.has(k)) tx.remove(r);
    for (const [k, r] of afterShared) if (!before?.shared.has(k)) addShared(tx, r);
  }
  return tx;
}
