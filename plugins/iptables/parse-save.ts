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

export function parseSave(text: string): SavedState {
  const state: SavedState = { chains: new Map(tables.map((t) => [t, new Set<string>()])), jumps: [] };
  let table: Table | undefined;
  for (const raw of text.split("\n")) {
    const line = raw.trimEnd();
    if (line.startsWith("*")) {
      const t = line.slice(1);
      table = (tables as readonly string[]).includes(t) ? (t as Table) : undefined;
      continue;
    }
    if (!table) continue;
    if (line.startsWith(":")) {
      const name = line.slice(1).split(" ")[0];
      if (name.startsWith(prefix)) state.chains.get(table)!.add(name);
      continue;
    }
    if (!line.startsWith("-A ")) continue;
    const from = line.split(" ")[1];
    const jump = / -[jg] (\S+)/.exec(line);
    if (builtins.has(from) && jump?.[1].startsWith(prefix)) state.jumps.push({ table, from, to: jump[1], line });
  }
  return state;
}
