// Rules as typed data, and the one function that prints them as
// `iptables-restore --noflush` input. Nothing else in the backend builds
// restore text.
//
// With --noflush a restore touches only what it names: `:CHAIN - [0:0]`
// creates the chain or flushes it, `-A/-I/-D` edit single rules, `-X` deletes
// a chain (which must be empty and unreferenced by then: the printer puts
// every `-X` after every flush and rule edit of its table).

import { maxChainName, tables, type Table } from "./names.ts";

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

export type Op =
  /** create the chain, or flush it if it exists */
  | { kind: "chain"; table: Table; chain: string }
  | { kind: "rule"; verb: "-A" | "-D"; rule: Rule }
  /** `-I chain 1`: keeps a chain's fixed tail last */
  | { kind: "rule"; verb: "-I"; rule: Rule }
  /** delete a rule exactly as `iptables-save` printed it (built-in chain jumps found on the host) */
  | { kind: "saved-delete"; table: Table; line: string }
  | { kind: "delete-chain"; table: Table; chain: string };

const safeToken = /^[^\s"']+$/;

/**
 * An ordered list of operations. Adding never throws: the first validation
 * error is kept and reported when the transaction is applied.
 */
export class Transaction {
  readonly ops: Op[] = [];
  error: string | undefined;

  private check(ok: boolean, why: () => string) {
    if (!ok && this.error === undefined) this.error = why();
  }

  private checkChain(chain: string) {
    this.check(chain.length > 0 && chain.length <= maxChainName && safeToken.test(chain), () => `chain name ${JSON.stringify(chain)} is invalid (max ${maxChainName} characters, no spaces)`);
  }

  private checkRule(rule: Rule) {
    this.checkChain(rule.chain);
    for (const t of [...rule.match, ...rule.target]) this.check(safeToken.test(t), () => `rule in ${rule.chain}: token ${JSON.stringify(t)} is invalid`);
  }

  declare(table: Table, chain: string) {
    this.checkChain(chain);
    this.ops.push({ kind: "chain", table, chain });
  }
  append(rule: Rule) {
    this.checkRule(rule);
    this.ops.push({ kind: "rule", verb: "-A", rule });
  }
  insert(rule: Rule) {
    this.checkRule(rule);
    this.ops.push({ kind: "rule", verb: "-I", rule });
  }
  remove(rule: Rule) {
    this.checkRule(rule);
    this.ops.push({ kind: "rule", verb: "-D", rule });
  }
  removeSaved(table: Table, line: string) {
    this.check(line.startsWith("-A ") && !line.includes("\n"), () => `saved rule ${JSON.stringify(line)} is not an -A line`);
    this.ops.push({ kind: "saved-delete", table, line });
  }
  deleteChain(table: Table, chain: string) {
    this.checkChain(chain);
    this.ops.push({ kind: "delete-chain", table, chain });
  }
  get size() {
    return this.ops.length;
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

// Within a table: flushes/creations first (so no old rule references a chain
// about to be deleted), then rule deletions, then additions, then `-X`.
const rank: Record<Op["kind"], number> = { chain: 0, "saved-delete": 1, rule: 2, "delete-chain": 3 };
const verbRank = { "-D": 0, "-A": 1, "-I": 1 } as const;

function opLine(op: Op): string {
  switch (op.kind) {
    case "chain":
      return `:${op.chain} - [0:0]`;
    case "rule":
      return ruleLine(op.rule, op.verb);
    case "saved-delete":
      return `-D ${op.line.slice(3)}`;
    case "delete-chain":
      return `-X ${op.chain}`;
  }
}

const opTable = (op: Op): Table => (op.kind === "rule" ? op.rule.table : op.table);

/** The restore input; "" when the transaction is empty (nothing to run). */
export function printRestore(tx: Transaction): string {
  const out: string[] = [];
  for (const table of tables) {
    const ops = tx.ops
      .map((op, i) => ({ op, i }))
      .filter(({ op }) => opTable(op) === table)
      .sort((a, b) => {
        const r = rank[a.op.kind] - rank[b.op.kind];
        if (r) return r;
        if (a.op.kind === "rule" && b.op.kind === "rule") return verbRank[a.op.verb] - verbRank[b.op.verb] || a.i - b.i;
        return a.i - b.i;
      });
    if (!ops.length) continue;
    out.push(`*${table}`);
    for (const { op } of ops) out.push(opLine(op));
    out.push("COMMIT");
  }
  return out.length ? out.join("\n") + "\n" : "";
}
