// Rules as data: a transaction is a list of typed operations printed once as
// an `nft -f -` script (one statement per line, so the statement count of a
// sync is the number of operations). Elements travel in batches, one
// statement per set and verb: nft parses and commits 100,000 elements of one
// statement far faster than 100,000 statements. Adding never throws: the first
// validation error is kept and reported when the transaction is applied, so
// a renderer can build a whole sync without try/catch around every rule.

import { comment, TABLE, type TableFamily } from "./names.ts";

export interface SetSpec {
  name: string;
  /** e.g. "ipv4_addr . inet_proto . inet_service : verdict" for a map */
  type: string;
  /** print `typeof` instead of `type` (for keys without a named datatype, like numgen) */
  typeOf?: boolean;
  flags?: string[];
  /** seconds, for dynamic affinity sets */
  timeout?: number;
  /** interval sets: merge overlapping elements instead of failing */
  autoMerge?: boolean;
  comment?: string;
}

/** one set or map element; value and comment are only printed when adding */
export interface ElementSpec {
  key: string;
  value?: string;
  comment?: string;
}

export interface ChainSpec {
  name: string;
  base?: { type: string; hook: string; priority: string };
  comment?: string;
}

export type Op =
  /** `create` fails when the table exists (EEXIST), where `add` leaves it as it is */
  | { kind: "table"; verb: "add" | "create" | "delete"; family: TableFamily; comment?: string }
  | { kind: "chain"; verb: "add"; family: TableFamily; chain: ChainSpec }
  | { kind: "chain"; verb: "flush" | "delete"; family: TableFamily; name: string }
  | { kind: "rule"; family: TableFamily; chain: string; rule: string; comment?: string }
  | { kind: "set" | "map"; verb: "add"; family: TableFamily; set: SetSpec }
  | { kind: "set" | "map"; verb: "delete" | "flush"; family: TableFamily; name: string }
  | { kind: "elements"; verb: "add" | "delete"; family: TableFamily; set: string; items: readonly ElementSpec[] }
  | { kind: "note"; text: string };

const quote = (s: string) => `"${comment(s)}"`;
const nameRe = /^[A-Za-z][A-Za-z0-9_./-]{0,254}$/;

function printSet(s: SetSpec): string {
  const parts = [`${s.typeOf ? "typeof" : "type"} ${s.type};`];
  if (s.flags?.length) parts.push(`flags ${s.flags.join(",")};`);
  if (s.timeout !== undefined) parts.push(`timeout ${s.timeout}s;`);
  if (s.autoMerge) parts.push("auto-merge;");
  if (s.comment) parts.push(`comment ${quote(s.comment)};`);
  return `{ ${parts.join(" ")} }`;
}

export function printOp(op: Op): string {
  if (op.kind === "note") return `# ${op.text}`;
  const t = `${op.family} ${TABLE}`;
  switch (op.kind) {
    case "table":
      return op.verb !== "delete" && op.comment ? `${op.verb} table ${t} { comment ${quote(op.comment)}; }` : `${op.verb} table ${t}`;
    case "chain":
      if (op.verb !== "add") return `${op.verb} chain ${t} ${op.name}`;
      if (op.chain.base) {
        const b = op.chain.base;
        return `add chain ${t} ${op.chain.name} { type ${b.type} hook ${b.hook} priority ${b.priority}; }`;
      }
      return op.chain.comment
        ? `add chain ${t} ${op.chain.name} { comment ${quote(op.chain.comment)}; }`
        : `add chain ${t} ${op.chain.name}`;
    case "rule":
      return `add rule ${t} ${op.chain} ${op.rule}${op.comment ? ` comment ${quote(op.comment)}` : ""}`;
    case "set":
    case "map":
      return op.verb === "add" ? `add ${op.kind} ${t} ${op.set.name} ${printSet(op.set)}` : `${op.verb} ${op.kind} ${t} ${op.name}`;
    case "elements":
      return `${op.verb} element ${t} ${op.set} { ${op.verb === "add" ? op.items.map(printElement).join(", ") : op.items.map((e) => e.key).join(", ")} }`;
  }
}

function printElement(e: ElementSpec): string {
  if (e.comment) return `${e.key} comment ${quote(e.comment)}${e.value !== undefined ? ` : ${e.value}` : ""}`;
  return e.value !== undefined ? `${e.key} : ${e.value}` : e.key;
}

export class Transaction {
  readonly ops: Op[] = [];
  private error: string | undefined;

  add(op: Op): this {
    if (!this.error) {
      const bad = validate(op);
      if (bad) this.error = bad;
    }
    this.ops.push(op);
    this.printed = undefined;
    return this;
  }

  /** the first validation error, if any; the executor refuses to apply a transaction that has one */
  get err(): string | undefined {
    return this.error;
  }

  get empty(): boolean {
    return !this.ops.some((op) => op.kind !== "note" && !(op.kind === "elements" && !op.items.length));
  }

  /** statements sent to nft: one per op but empty element lists (counted, not printed: a first load whose elements go on kpng's socket prints none of them) */
  get statements(): number {
    let n = 0;
    for (const op of this.ops) if (!(op.kind === "elements" && !op.items.length)) n++;
    return n;
  }

  print(): string {
    if (this.printed === undefined) {
      const lines = this.build();
      this.printed = lines.join("\n") + (lines.length ? "\n" : "");
    }
    return this.printed;
  }

  private printed: string | undefined;

  private build(): string[] {
    const out: string[] = [];
    for (const op of this.ops) {
      if (op.kind === "elements" && !op.items.length) continue;
      out.push(printOp(op));
    }
    return out;
  }
}

const unsafe = /[\n;#]/;

function validate(op: Op): string | undefined {
  // Names are checked where objects are created; rules and elements only
  // refer to them (nft reports a reference to a missing object itself).
  let name: string | undefined;
  if (op.kind === "chain" && op.verb === "add") name = op.chain.name;
  if ((op.kind === "set" || op.kind === "map") && op.verb === "add") name = op.set.name;
  if (name !== undefined && !nameRe.test(name)) return `invalid nft name ${JSON.stringify(name)}`;
  // Rule text is built from checked addresses and numbers; a newline or a
  // semicolon would smuggle a second statement into the script. Element
  // keys and values are only ever addresses, integers, protocol names and
  // `goto <checked name>`: not re-checked, there are 100,000s of them.
  if (op.kind === "rule" && unsafe.test(op.rule)) return `invalid nft rule ${JSON.stringify(op.rule)}`;
  return undefined;
}

/**
 * A first load into empty tables, as `1 + parts` transactions: everything but
 * the added elements (tables, chains, rules, sets, maps: the skeleton), then
 * the elements in `parts` batches of about the same size, in their order.
 * nft parses its input on one core, and parsing is most of a big load (nft
 * 1.0.6): the batches, run at the same time after the skeleton, parse side
 * by side and only their commits take turns in the kernel (the footprint
 * figures of docs/results/2026-11.md, from bench startup). Only for empty tables:
 * until the last batch commits, some services have rules and others none,
 * which over empty tables is no worse than before the load began; rules in
 * place are always rewritten in one transaction.
 * Below `min` added elements the transaction is returned whole.
 */
export function splitFirstLoad(tx: Transaction, parts: number, min: number): Transaction[] {
  let total = 0;
  for (const op of tx.ops) if (op.kind === "elements" && op.verb === "add") total += op.items.length;
  if (parts < 2 || total < min) return [tx];
  const skeleton = new Transaction();
  const batches = Array.from({ length: parts }, () => new Transaction());
  const per = Math.ceil(total / parts);
  let b = 0;
  let room = per;
  for (const op of tx.ops) {
    if (op.kind !== "elements" || op.verb !== "add") {
      skeleton.add(op);
      continue;
    }
    for (let from = 0; from < op.items.length; ) {
      if (room === 0) [b, room] = [b + 1, per];
      const n = Math.min(room, op.items.length - from);
      batches[b].add({ ...op, items: op.items.slice(from, from + n) });
      from += n;
      room -= n;
    }
  }
  return [skeleton, ...batches.filter((t) => !t.empty)];
}
