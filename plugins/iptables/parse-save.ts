// What a full restore needs to know about the host, read from `iptables-save`:
// which KPNG- chains exist (leftovers get deleted) and which built-in chains
// already jump into them (so jumps are inserted once, not once per restore).
// Pure: text in, data out.

import { prefix, tables, type Table } from "./names.ts";

export interface SavedJump {
  table: Table;
  /** the built-in chain */
  from: string;
  /** the KPNG- chain it jumps to */
  to: string;
  /** the rule exactly as iptables-save printed it (`-A ...`): deletable as is */
  line: string;
}

export interface SavedState {
  /** KPNG- chains per table */
  chains: Map<Table, Set<string>>;
  jumps: SavedJump[];
}

const builtins = new Set(["PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING"]);

/**
 * The lines of `iptables-save` text that kpng reads, in its own tables only:
 * chain declarations (`:NAME ...`) and rules (`-A ...`), each with its table,
 * trailing blanks trimmed. parseSave and verify.ts's savedRules read through it.
 */
export function* savedTableLines(text: string): Generator<{ table: Table; line: string }> {
  let table: Table | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trimEnd();
    if (line.startsWith("*")) {
      const t = line.slice(1);
      table = (tables as readonly string[]).includes(t) ? (t as Table) : undefined;
    } else if (table && (line.startsWith(":") || line.startsWith("-A "))) yield { table, line };
  }
}

/** the chain a `:NAME POLICY [0:0]` line declares */
export const declaredChain = (line: string) => line.slice(1).split(" ")[0];

export function parseSave(text: string): SavedState {
  const state: SavedState = { chains: new Map(tables.map((t) => [t, new Set<string>()])), jumps: [] };
  for (const { table, line } of savedTableLines(text)) {
    if (line.startsWith(":")) {
      const name = declaredChain(line);
      if (name.startsWith(prefix)) state.chains.get(table)!.add(name);
      continue;
    }
    const from = line.split(" ")[1];
    const jump = / -[jg] (\S+)/.exec(line);
    if (builtins.has(from) && jump?.[1].startsWith(prefix)) state.jumps.push({ table, from, to: jump[1], line });
  }
  return state;
}
