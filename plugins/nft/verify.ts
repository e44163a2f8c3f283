// `kpng verify` for nft: kpng's two tables read back and compared with what
// the backend last programmed (programmed.ts). Read on kpng's own netlink
// socket where it has one (netlink-dump.ts: one dump each of chains, rules,
// sets, and of each set's elements; the one interval set through `nft -j list
// set`), else with `nft -j list table`, one per family (nft 1.0.6 takes
// seconds for it at a few thousand services, netlink-dump.ts). Each difference is named by the
// Service that owns the object and the frontend it serves:
// - a chain kpng wrote that is gone, or one in kpng's table it did not write;
// - a chain's rules: those kpng wrote are told apart by their comments (the
//   kernel prints a rule back in its own words, not kpng's text), so a rule
//   deleted or added is found, one edited in place keeping its comment is not;
// - a set or map gone or added, and its elements: missing, extra, or under
//   the same key with another value (verdict, endpoint) or comment. The
//   elements of affinity sets are the packets' and are not compared.

import * as v from "valibot";
import type { Drift, Executor } from "../../src/host/toolkit/index.ts";
import { frontendName, serviceOfComment } from "../../src/host/toolkit/index.ts";
import { canonicalIPv6 } from "./addr.ts";
import { SYNC_STAMP_SET, TABLE, type TableFamily } from "./names.ts";
import { setLayout } from "./netlink-batch.ts";
import { chainsOf, decodeValue, DumpError, dumpMessages, dumpRequest, elementsOf, MSG, REQUEST, rulesOf, setsOf } from "./netlink-dump.ts";
import type { BatchSocket } from "./netlink-socket.ts";
import { kernelComment, type ProgrammedElement, type ProgrammedTable } from "./programmed.ts";

/** a set or map as the kernel holds it: its elements as text, by normalized key */
export interface KernelSet {
  kind: "set" | "map";
  elements: Map<string, { key: string; value?: string; comment: string }>;
}

/** one family's table as the kernel holds it */
export interface KernelTable {
  family: TableFamily;
  chains: Map<string, { rules: { comment: string; text: string }[] }>;
  sets: Map<string, KernelSet>;
}

const Item = v.record(v.string(), v.unknown());
const Listing = v.object({ nftables: v.array(Item) });
const Named = v.object({ name: v.string() });
const Rule = v.object({ chain: v.string(), comment: v.optional(v.string()), expr: v.optional(v.array(v.unknown())) });
const SetBody = v.object({ name: v.string(), elem: v.optional(v.array(v.unknown())) });

/** `nft -j list table FAMILY kpng`; a table that does not exist holds nothing */
export async function readTable(exec: Executor, family: TableFamily): Promise<KernelTable> {
  let out: string;
  try {
    out = await exec.run(["nft", "-j", "list", "table", family, TABLE]);
  } catch (err) {
    if (/No such file or directory/.test(String(err))) return { family, chains: new Map(), sets: new Map() };
    throw err;
  }
  return parseTable(family, out);
}

/**
 * One family's table read on kpng's netlink socket (netlink-dump.ts). Only
 * the elements `want` compares are dumped (not those of affinity sets); a
 * set whose layout the decoder does not know (the interval set of node-port
 * addresses) is read with `nft -j list set`.
 */
export async function readTableNetlink(socket: BatchSocket, exec: Executor, want: ProgrammedTable): Promise<KernelTable> {
  const family = want.family;
  const t: KernelTable = { family, chains: new Map(), sets: new Map() };
  // a table (or set) that does not exist holds nothing: the kernel answers ENOENT to some dumps of it, nothing to others
  const dump = (type: number, reply: number, what: string, set?: string) => {
    try {
      return dumpMessages(socket.send(dumpRequest(type, family, 1, set)), reply, `${what} of ${family} ${TABLE}`);
    } catch (err) {
      if (err instanceof DumpError && err.errno === 2) return [];
      throw err;
    }
  };
  const chains = chainsOf(dump(REQUEST.chains, MSG.newChain, "chains"));
  for (const name of chains) t.chains.set(name, { rules: [] });
  // its expressions are not decoded: `nft -a list chain` shows the rule of that handle
  for (const r of rulesOf(dump(REQUEST.rules, MSG.newRule, "rules")))
    t.chains.get(r.chain)?.rules.push({ comment: r.comment, text: `handle ${r.handle}` });
  for (const { name, map } of setsOf(dump(REQUEST.sets, MSG.newSet, "sets"))) {
    const elements: KernelSet["elements"] = new Map();
    t.sets.set(name, { kind: map ? "map" : "set", elements });
    const w = want.sets.get(name);
    if (!w?.elements) continue;
    const layout = setLayout(w.spec);
    if (!layout) {
      const listed = parseTable(family, await exec.run(["nft", "-j", "list", w.kind, family, TABLE, name])).sets.get(name);
      for (const [k, e] of listed?.elements ?? []) elements.set(k, e);
      continue;
    }
    for (const e of elementsOf(dump(REQUEST.elements, MSG.newSetElem, `set ${name}`, name))) {
      const key = decodeValue(layout.key, e.key);
      const data = e.data;
      const value =
        data === undefined || typeof data === "string" ? data : Array.isArray(layout.data) ? decodeValue(layout.data, data) : undefined;
      elements.set(normalizeKey(key), { key, value, comment: e.comment });
    }
  }
  return t;
}

/** the JSON of `nft -j list table` -> chains with their rules' comments, sets with their elements as text */
export function parseTable(family: TableFamily, json: string): KernelTable {
  const listing = v.safeParse(Listing, JSON.parse(json));
  if (!listing.success) throw new Error(`nft -j list table ${family} ${TABLE}: unexpected output: ${v.summarize(listing.issues)}`);
  const t: KernelTable = { family, chains: new Map(), sets: new Map() };
  for (const item of listing.output.nftables) {
    if (item.chain) t.chains.set(v.parse(Named, item.chain).name, { rules: [] });
    if (item.rule) {
      const r = v.parse(Rule, item.rule);
      const c = t.chains.get(r.chain) ?? { rules: [] };
      t.chains.set(r.chain, c);
      c.rules.push({ comment: r.comment ?? "", text: (r.expr ?? []).map(exprText).join(" ") });
    }
    for (const kind of ["set", "map"] as const) {
      if (!item[kind]) continue;
      const s = v.parse(SetBody, item[kind]);
      const elements = new Map<string, { key: string; value?: string; comment: string }>();
      for (const e of s.elem ?? []) {
        const [k, value] = kind === "map" && Array.isArray(e) ? [e[0], exprText(e[1])] : [e, undefined];
        const inner = isObject(k) && isObject(k.elem) ? k.elem : undefined;
        const key = exprText(inner ? inner.val : k);
        elements.set(normalizeKey(key), { key, value, comment: typeof inner?.comment === "string" ? inner.comment : "" });
      }
      t.sets.set(s.name, { kind, elements });
    }
  }
  return t;
}

const isObject = (x: unknown): x is Record<string, unknown> => typeof x === "object" && x !== null && !Array.isArray(x);

/** an nft JSON expression as the text kpng renders it: concatenations joined with " . ", verdicts as `goto chain` */
function exprText(x: unknown): string {
  if (typeof x === "string" || typeof x === "number") return String(x);
  if (!isObject(x)) return JSON.stringify(x);
  if (Array.isArray(x.concat)) return x.concat.map(exprText).join(" . ");
  if (isObject(x.prefix)) return `${exprText(x.prefix.addr)}/${exprText(x.prefix.len)}`;
  if (Array.isArray(x.range)) return x.range.map(exprText).join("-");
  if (isObject(x.elem)) return exprText(x.elem.val);
  for (const verdict of ["goto", "jump"])
    if (isObject(x[verdict])) return `${verdict} ${exprText((x[verdict] as Record<string, unknown>).target)}`;
  const keys = Object.keys(x);
  if (keys.length === 1 && x[keys[0]] === null) return keys[0]; // drop, accept, return
  return JSON.stringify(x);
}

/**
 * One spelling per element key or value: the kernel prints IPv6 addresses
 * compressed and a one-address prefix as the address, where kpng writes
 * what the API server spelled.
 */
export function normalizeKey(text: string): string {
  // most keys and values (IPv4, ports, positions, verdicts) have one spelling already
  if (text.indexOf(":") < 0 && text.indexOf("/") < 0 && text.indexOf('"') < 0) return text;
  return text
    .split(" . ")
    .map((part) => {
      const p = part.trim().replace(/^"(.*)"$/, "$1");
      const [addr, len] = p.split("/");
      if (!addr.includes(":") || !/^[0-9a-fA-F:.]+$/.test(addr)) return len === "32" ? addr : p;
      const canon = canonicalIPv6(addr);
      return len === undefined || len === "128" ? canon : `${canon}/${len}`;
    })
    .join(" . ");
}

/** which frontend an element of `set` serves, from its key: "10.96.0.10:80/TCP", "nodePort 30080/TCP", a cluster IP */
export function elementFrontend(set: string, key: string): string {
  const parts = key.split(" . ");
  const proto = /^(tcp|udp|sctp)$/;
  if (parts.length === 3 && proto.test(parts[1])) return frontendName({ ip: parts[0], protocol: parts[1], port: Number(parts[2]) });
  if (parts.length === 2 && proto.test(parts[0])) return frontendName({ protocol: parts[0], port: Number(parts[1]), nodePort: true });
  const targetPorts = /^cluster-target-ports-(tcp|udp|sctp)$/.exec(set);
  if (parts.length === 2 && targetPorts) return frontendName({ ip: parts[0], protocol: targetPorts[1], port: Number(parts[1]) });
  // cluster-ips, cluster-endpoints (cluster IP . position): the cluster IP; a slot of a shard map or a hairpin pair: none
  if (set === "cluster-ips" || set.startsWith("cluster-endpoints-")) return parts[0];
  return "";
}

/** the Service of a chain kpng did not write, from its name (names.ts: svc-HASH-ns/name/proto/port …) */
const serviceOfChain = (name: string) => serviceOfComment(/^(?:svc|ext|fw|ep)-[A-Z2-7]{8}-(.*)$/.exec(name)?.[1]);

/** every difference between what kpng programmed into one family's table and what the kernel holds */
export function compareTable(want: ProgrammedTable, got: KernelTable): Drift[] {
  const out: Drift[] = [];
  const f = want.family;
  const drift = (service: string, frontend: string, kind: Drift["kind"], detail: string) => out.push({ service, frontend, kind, detail });
  for (const [name, c] of want.chains) {
    const held = got.chains.get(name);
    if (!held) {
      drift(c.owner, "", "missing", `chain ${f} ${TABLE} ${name}`);
      continue;
    }
    compareRules(name, c.rules, held.rules, (kind, detail) => drift(c.owner, "", kind, `${f} ${TABLE} ${name}: ${detail}`));
  }
  for (const name of got.chains.keys()) if (!want.chains.has(name)) drift(serviceOfChain(name), "", "extra", `chain ${f} ${TABLE} ${name}`);
  for (const [name, s] of want.sets) {
    const held = got.sets.get(name) ?? NO_SET;
    if (held === NO_SET) drift(s.owner, "", "missing", `${s.kind} ${f} ${TABLE} ${name}`);
    // with the set gone, each of its elements is named too: they say which Services and frontends lost what
    if (!s.elements) continue;
    for (const [k, e] of s.elements) {
      const h = held.elements.get(k);
      const where = `${s.kind} ${f} ${TABLE} ${name}`;
      if (!h) drift(e.owner, elementFrontend(name, k), "missing", `element ${elementText(e)} in ${where}`);
      else if (!sameElement(e, h))
        drift(e.owner, elementFrontend(name, k), "differs", `element ${elementText(e)} in ${where}, kernel holds ${elementText(h)}`);
    }
    for (const [k, h] of held.elements)
      if (!s.elements.has(k))
        drift(
          serviceOfComment(h.comment),
          elementFrontend(name, k),
          "extra",
          `element ${elementText(h)} in ${s.kind} ${f} ${TABLE} ${name}`,
        );
  }
  for (const [name, s] of got.sets)
    if (!want.sets.has(name) && name !== SYNC_STAMP_SET) drift("", "", "extra", `${s.kind} ${f} ${TABLE} ${name}`);
  return out;
}

const NO_SET: KernelSet = { kind: "set", elements: new Map() };

const elementText = (e: { key: string; value?: string; comment?: string }) =>
  `${e.key}${e.value !== undefined ? ` : ${e.value}` : ""}${e.comment ? ` (${e.comment})` : ""}`;

function sameElement(want: ProgrammedElement, held: { value?: string; comment: string }): boolean {
  const value = (x: string | undefined) => (x === undefined ? undefined : normalizeKey(x));
  const sameValue = want.value === held.value || value(want.value) === value(held.value);
  // the comment as written, unless it had to be cut or cleaned (names.comment)
  return sameValue && (want.comment ?? "") === held.comment ? true : sameValue && kernelComment(want.comment) === held.comment;
}

/**
 * A chain's rules, told apart by comment (the kernel's JSON of a rule is not
 * kpng's text): each comment kpng wrote as many times as it wrote it, in order.
 */
function compareRules(
  chain: string,
  want: readonly { rule: string; comment?: string }[],
  held: readonly { comment: string; text: string }[],
  report: (kind: Drift["kind"], detail: string) => void,
) {
  const left = new Map<string, number>();
  for (const h of held) left.set(h.comment, (left.get(h.comment) ?? 0) + 1);
  let inOrder = want.length === held.length;
  let found = false;
  want.forEach((r, i) => {
    const c = kernelComment(r.comment);
    if (inOrder && held[i].comment !== c) inOrder = false;
    const n = left.get(c) ?? 0;
    if (n) left.set(c, n - 1);
    else {
      found = true;
      report("missing", `rule ${r.rule}${r.comment ? ` comment "${r.comment}"` : ""}`);
    }
  });
  for (const h of held) {
    const n = left.get(h.comment) ?? 0;
    if (!n) continue;
    left.set(h.comment, n - 1);
    found = true;
    report("extra", `rule ${h.text}${h.comment ? ` comment "${h.comment}"` : ""}`);
  }
  if (!found && !inOrder) report("differs", `rules of chain ${chain} in another order`);
}
