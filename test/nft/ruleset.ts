// Reads kpng's tables back from a namespace as a canonical text, to compare
// what a series of partial syncs left in the kernel with what one full sync
// writes. Handles are dropped, set elements sorted, and the dispatch slots
// (which depend on sync history, see plugins/nft/names.ts) replaced by the
// chain that owns them. The order of a dispatch list depends on history too
// (plugins/nft/positions.ts): a list reads as whether its positions are
// [0, n) and its endpoints, sorted.

import { MAX_DISPATCH } from "../../plugins/nft/names.ts";
import type { Topology } from "../harness/netns.ts";

type Json = Record<string, unknown>;
const slotMap = /^@(endpoints-tcp|endpoints-udp|endpoints-sctp|endpoint-chains)-\d+$/;

export async function canonicalRuleset(topo: Topology, ns: string): Promise<string> {
  const out = await topo.exec(ns, ["nft", "-j", "list", "ruleset"]);
  const items = (JSON.parse(out) as { nftables: Json[] }).nftables.filter((x) => !("metainfo" in x));
  // slots are allocated per family
  const slotOwner = new Map<string, string>();

  // first pass: which chain owns which slot
  const rules: string[] = [];
  for (const x of items) {
    const r = x.rule as Json | undefined;
    if (!r) continue;
    const text = JSON.stringify(r.expr, (k, v) => {
      // shared dispatch chains use no slot (their numgen is keyed by cluster IP)
      if (k === "numgen" && v && typeof v === "object" && "offset" in v && !String(r.chain).startsWith("dispatch-")) {
        slotOwner.set(`${r.family}/${Math.floor((v as { offset: number }).offset / MAX_DISPATCH)}`, `${r.chain}`);
        return { ...v, offset: "slot" };
      }
      if (typeof v === "string" && slotMap.test(v)) return v.replace(/-\d+$/, "");
      return v;
    });
    rules.push(`rule ${r.family} ${r.table} ${r.chain} ${text} ${r.comment ?? ""}`);
  }

  const lines: string[] = [...rules];
  for (const x of items) {
    const [kind, body] = Object.entries(x)[0] as [string, Json];
    if (kind === "rule") continue;
    const { handle: _h, elem, ...rest } = body;
    let name = String(body.name ?? "");
    const elems = (elem as unknown[] | undefined) ?? [];
    const slots = slotMap.test(`@${name}`);
    if (slots || name.startsWith("cluster-endpoints-")) {
      if (slots) name = name.replace(/-\d+$/, "");
      // list -> its positions and endpoints
      const lists = new Map<string, { at: number[]; values: string[] }>();
      for (const e of elems) {
        const [k, v] = e as [number | { concat: [string, number] }, unknown];
        // slot maps are keyed by position, cluster-endpoints maps by cluster IP . position
        // (the slot itself depends on history; a cluster IP's port index does not)
        const [at, list] =
          typeof k === "number"
            ? [k, slotOwner.get(`${body.family}/${Math.floor(k / MAX_DISPATCH)}`) ?? "?"]
            : [k.concat[1], `${k.concat[0]}#${Math.floor(k.concat[1] / MAX_DISPATCH)}`];
        const l = lists.get(list) ?? { at: [], values: [] };
        lists.set(list, l);
        l.at.push(at % MAX_DISPATCH);
        l.values.push(JSON.stringify(v));
      }
      // empty shards say nothing
      for (const [list, l] of lists) {
        const dense = l.at.sort((a, b) => a - b).every((x, i) => x === i);
        lines.push(`list ${body.family} ${name} ${list}: ${l.at.length} positions${dense ? "" : ` NOT DENSE ${l.at.join(",")}`}`);
        lines.push(...l.values.sort().map((v) => `elem ${body.family} ${name} ${list} ${v}`));
      }
      continue;
    }
    lines.push(`${kind} ${JSON.stringify({ ...rest, name })}`);
    lines.push(...elems.map((e) => `elem ${body.family} ${name} ${JSON.stringify(e)}`));
  }
  // rules keep their order inside a chain (stable sort by chain only)
  return lines
    .map((l, i) => [l, i] as const)
    .sort(([a, i], [b, j]) => {
      const ka = a.startsWith("rule ") ? a.split(" ").slice(0, 4).join(" ") : a;
      const kb = b.startsWith("rule ") ? b.split(" ").slice(0, 4).join(" ") : b;
      return ka < kb ? -1 : ka > kb ? 1 : i - j;
    })
    .map(([l]) => l)
    .join("\n");
}
