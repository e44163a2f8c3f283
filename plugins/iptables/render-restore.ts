// Rules as typed data, and the one function that prints them as
// `iptables-restore --noflush` input. Nothing else in the backend builds
// restore text.
//
// With --noflush a restore touches only what it names: `:CHAIN - [0:0]`
// creates the chain or flushes it, `-A/-I/-D` edit single rules, `-X` deletes
// a chain (which must be empty and unreferenced by then: the printer puts
// every `-X` after every flush and rule edit of its table).

import type { StdinChunk } from "../../src/host/toolkit/index.ts";
import { baseJumps, maxChainName, tables, type Table } from "./names.ts";

export interface Rule {
  table: Table;
  chain: string;
  /** match tokens, e.g. ["-d", "198.18.0.1", "-p", "tcp", "-m", "tcp", "--dport", "80"] */
  match: readonly string[];
  /** target tokens, e.g. ["-j", "DNAT", "--to-destination", "198.19.0.1:8080"] */
  target: readonly string[];
  /** shown by `iptables-save`, for operators (no double quotes or newlines) */
  comment?: string;
}

const safeToken = /^[^\s"']+$/;

// Within a table: deletions of saved rules and of rules first, then chain
// declarations (create or flush) and rule additions in the order they were
// added, then `-X` (by then every chain that referenced a deleted one has
// been flushed or edited). Callers declare a chain before adding rules that
// jump to it, and add a chain's rules right after declaring it: iptables-nft
// 1.8.9 finds chains in 512 hash buckets, newest first, so rules that follow
// their chain's declaration find it at once, while rules added after all
// declarations walked half a bucket each (most of a big restore; see docs/results/2026-11.md).
const Group = { SavedDeletes: 0, Deletes: 1, Body: 2, ChainDeletes: 3 } as const;
type Group = (typeof Group)[keyof typeof Group];

/**
 * The operations of one restore. Each is printed once, when added, by
 * `ruleLine` or its chain-level siblings below, and kept as text only: a full
 * restore at 10,000 services holds hundreds of thousands of them, and
 * keeping their rule objects alive raised the peak memory a great deal.
 * Adding never throws: the first validation error is kept and reported when
 * the transaction is applied.
 */
export class Transaction {
  private readonly lines = new Map<Table, string[][]>(tables.map((t) => [t, [[], [], [], []]]));
  private count = 0;
  private readonly rules = new Map<Table, number>(tables.map((t) => [t, 0]));
  error: string | undefined;

  private fail(why: string) {
    this.error ??= why;
  }

  private checkChain(chain: string) {
    if (!(chain.length > 0 && chain.length <= maxChainName && safeToken.test(chain)))
      this.fail(`chain name ${JSON.stringify(chain)} is invalid (max ${maxChainName} characters, no spaces)`);
  }

  // Runs for every rule of a 10,000-service restore: no allocation unless something is wrong.
  private checkRule(rule: Rule) {
    this.checkChain(rule.chain);
    for (const tokens of [rule.match, rule.target]) {
      for (const t of tokens) if (!safeToken.test(t)) this.fail(`rule in ${rule.chain}: token ${JSON.stringify(t)} is invalid`);
    }
  }

  private add(table: Table, group: Group, line: string) {
    this.lines.get(table)![group].push(line);
    this.count++;
  }

  /** create the chain, or flush it if it exists */
  declare(table: Table, chain: string) {
    this.checkChain(chain);
    this.add(table, Group.Body, `:${chain} - [0:0]`);
  }
  /** `line`: the rule already printed by `ruleLine` (a chain's lines are printed once, for its digest too) */
  append(rule: Rule, line = ruleLine(rule)) {
    this.checkRule(rule);
    this.add(rule.table, Group.Body, line);
    this.rules.set(rule.table, this.rules.get(rule.table)! + 1);
  }
  /** `-I chain 1`: keeps a chain's fixed tail last */
  insert(rule: Rule) {
    this.checkRule(rule);
    this.add(rule.table, Group.Body, ruleLine(rule, "-I"));
    this.rules.set(rule.table, this.rules.get(rule.table)! + 1);
  }
  remove(rule: Rule) {
    this.checkRule(rule);
    this.add(rule.table, Group.Deletes, ruleLine(rule, "-D"));
  }
  /** delete a rule exactly as `iptables-save` printed it (built-in chain jumps found on the host) */
  removeSaved(table: Table, line: string) {
    if (!line.startsWith("-A ") || line.includes("\n")) this.fail(`saved rule ${JSON.stringify(line)} is not an -A line`);
    this.add(table, Group.SavedDeletes, `-D ${line.slice(3)}`);
  }
  deleteChain(table: Table, chain: string) {
    this.checkChain(chain);
    this.add(table, Group.ChainDeletes, `-X ${chain}`);
  }
  get size() {
    return this.count;
  }
  /** rules this restore writes (appends or inserts) in `table` */
  rulesWritten(table: Table): number {
    return this.rules.get(table)!;
  }
  /** one table's lines, in restore order */
  tableLines(table: Table): string[] {
    return this.lines.get(table)!.flat();
  }
  /** one table's lines by group, as they grow (streamRestore reads the body while it is written) */
  groups(table: Table): readonly (readonly string[])[] {
    return this.lines.get(table)!;
  }
}

const cleanComment = (c: string) => c.replace(/["\\\n\r]/g, "").slice(0, 250);

/** The rule as restore input after the verb and chain, e.g. `-m comment --comment "x" -d 1.2.3.4 -j KPNG-SVC-...`. */
export function ruleSpec(rule: Rule): string {
  const parts: string[] = [];
  if (rule.comment) parts.push("-m", "comment", "--comment", `"${cleanComment(rule.comment)}"`);
  parts.push(...rule.match, ...rule.target);
  return parts.join(" ");
}

/** One line, e.g. `-A KPNG-SVC-X -m comment ... -j KPNG-SEP-Y`: also the identity used to diff rules. */
export const ruleLine = (rule: Rule, verb = "-A") => `${verb} ${rule.chain}${verb === "-I" ? " 1" : ""} ${ruleSpec(rule)}`;

/**
 * Above this many operations in one table, the table's block starts with the
 * bulk preamble. iptables-nft 1.8.x (nft-cache.c, cache_chain_list_insert)
 * keeps every chain name a --noflush restore mentions, jump targets included,
 * in a sorted linked list: O(chains) per line, O(n^2) per restore: seconds
 * at 1,000 services and hours at 10,000 (see docs/results/2026-11.md). A command
 * without a chain switches that list off ("all chains").
 *
 * The preamble's command is `-S`: it only lists the table (on stdout, which
 * kpng ignores). Not `-Z`, which switches the list off too but zeroes the
 * packet counters of every rule in the table, other software's included,
 * and makes iptables-nft replace each of those rules (a big restore is far
 * slower with `-Z`; see docs/results/2026-11.md). `-S` has one quirk in 1.8.9: with it,
 * rules cannot be inserted into a built-in chain the kernel does not hold yet
 * (nf_tables creates them lazily). The preamble therefore first declares the
 * built-in chains kpng jumps from, with policy `-`: that creates a missing one
 * and leaves an existing one's policy, rules and counters as they are (checked
 * with iptables-nft and iptables-legacy 1.8.9). Small restores (every partial
 * one of a few services) never need it.
 */
export const bulkThreshold = 1000;

/** Built-in chains of each table that kpng inserts jumps into. */
const builtinsOf = (table: Table) => [...new Set(baseJumps.filter((j) => j.table === table).map((j) => j.from))];

/** The lines a bulk table block starts with (see bulkThreshold). */
export const bulkPreamble = (table: Table) => [...builtinsOf(table).map((c) => `:${c} - [0:0]`), "-S"];

/** The restore input; "" when the transaction is empty (nothing to run). `bulk: false` never adds the bulk preamble. */
export function printRestore(tx: Transaction, opts: { bulk?: boolean } = {}): string {
  const out: string[] = [];
  for (const table of tables) printTable(tx, table, opts.bulk ?? true, out);
  return out.length ? out.join("\n") + "\n" : "";
}

/** One table's block, unless it is empty; `bulk`: with the preamble above bulkThreshold operations. */
function printTable(tx: Transaction, table: Table, bulk: boolean, out: string[]) {
  const lines = tx.tableLines(table);
  if (!lines.length) return;
  out.push(`*${table}`);
  if (bulk && lines.length > bulkThreshold) out.push(...bulkPreamble(table));
  for (const l of lines) out.push(l);
  out.push("COMMIT");
}

/**
 * A printed restore as stdin chunks whose first COMMIT is written only once
 * `gate` resolves: iptables-restore starts, parses the first table and reads
 * what it needs of the kernel meanwhile, and commits nothing before then. If
 * `gate` rejects, stdin ends there and nothing of the restore commits.
 */
export function* heldAtFirstCommit(text: string, gate: Promise<void>): Generator<StdinChunk> {
  const at = text.indexOf("\nCOMMIT\n") + 1; // a printed restore starts with its table's name: 0 = no COMMIT
  if (at > 0) yield text.slice(0, at);
  yield gate.then(() => text.slice(at));
}

/** lines of the nat table's body sent at a time while services render (~100 KB) */
const STREAM_LINES = 1000;

/**
 * A first restore's input as it is built: `building` adds to `tx` a step at a
 * time (plan.ts fullTransactionSteps), and the nat table's lines go
 * out as they come, since nat holds nearly all of them: its block first,
 * with the bulk preamble (the count is not known yet; a small block loses
 * nothing by it), then the other tables as printRestore prints them. Each
 * table commits at its own COMMIT, so this order is for a first restore only,
 * over tables kpng holds nothing in: a restore over rules in place keeps
 * printRestore's (filter first, so that a service losing its last endpoint
 * rejects before its DNAT goes). Invalid rules (tx.error) throw before nat's
 * COMMIT: nothing of the restore commits.
 */
export function* streamRestore(tx: Transaction, building: Iterator<unknown>): Generator<string> {
  const [savedDeletes, deletes, body, chainDeletes] = tx.groups("nat");
  const out = ["*nat", ...bulkPreamble("nat")];
  let sent = 0;
  const take = (lines: readonly string[], from = 0) => {
    for (let i = from; i < lines.length; i++) out.push(lines[i]);
  };
  const flush = () => {
    const text = `${out.join("\n")}\n`;
    out.length = 0;
    return text;
  };
  let step = building.next();
  // the deletions of saved rules come first; all are known once the first step is taken (fullTransactionSteps)
  take(savedDeletes);
  take(deletes);
  for (; !step.done; step = building.next()) {
    if (body.length - sent < STREAM_LINES) continue;
    take(body, sent);
    sent = body.length;
    yield flush();
  }
  if (tx.error) throw new Error(tx.error);
  take(body, sent);
  take(chainDeletes);
  out.push("COMMIT");
  for (const table of tables) if (table !== "nat") printTable(tx, table, true, out);
  yield flush();
}
