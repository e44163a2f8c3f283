// `kpng verify` for iptables: what `iptables-save` (one read per family,
// every table) and `ipset save` of the hairpin set hold, compared with what
// the backend last restored. Pure: the backend hands in what it programmed
// (its rules re-rendered from the state it last synced: the sync keeps only
// digests of them, plan.ts) and the text it read.
//
// A rule is known by what `iptables-save` prints back in kpng's own terms:
// its comment, addresses (-s, -d), protocol, destination port, target and
// DNAT destination; iptables-save reorders matches and spells addresses its
// way, so whole lines are not compared. Order within a chain is not compared
// either (a partial restore inserts service rules at the head of the fixed
// chains, a full one appends them). In the built-in chains only the jumps to
// kpng's chains are kpng's; other rules there are someone else's.

import { canonicalIP, type Drift, frontendName, serviceOfComment } from "../../src/host/toolkit/index.ts";
import { prefix } from "./names.ts";
import { declaredChain, savedTableLines } from "./parse-save.ts";
import type { Rule } from "./render-restore.ts";

/** one rule kpng restored, and the Service that owns it ("" for the fixed rules) */
export interface OwnedRule {
  rule: Rule;
  owner: string;
}

/** what one family's last restore and hairpin set hold */
export interface ProgrammedRules {
  /** `table/chain` -> its owner and rules; built-in chains hold kpng's jumps only */
  chains: Map<string, { owner: string; rules: OwnedRule[] }>;
  /** hairpin set name and its members -> owner; undefined when kpng uses no set */
  hairpin?: { set: string; members: Map<string, string> };
  /**
   * The chains (`table/chain`) of Services changed since the last restore:
   * their rules are known only by digest as the kernel holds them, so these
   * chains are left out on both sides.
   */
  pending?: Set<string>;
}

interface SavedRule {
  comment: string;
  tokens: string[];
  line: string;
}

/** `iptables-save` text -> kpng's chains (and the jumps into them from built-in chains) with their rules */
export function savedRules(text: string): Map<string, SavedRule[]> {
  const out = new Map<string, SavedRule[]>();
  for (const { table, line } of savedTableLines(text)) {
    if (line.startsWith(":")) {
      const name = declaredChain(line);
      if (name.startsWith(prefix)) out.set(`${table}/${name}`, []);
      continue;
    }
    const tokens = tokenize(line).slice(1);
    const chain = tokens.shift()!;
    const { comment, rest } = withoutComment(tokens);
    const r = { comment, tokens: rest, line };
    if (chain.startsWith(prefix)) out.get(`${table}/${chain}`)?.push(r);
    else if (target(rest).startsWith(prefix)) {
      const k = `${table}/${chain}`;
      out.set(k, [...(out.get(k) ?? []), r]);
    }
  }
  return out;
}

/** `ipset save SET` text -> its members, spelled as kpng writes them (protocol numbers, canonical addresses) */
export function savedMembers(text: string): Set<string> {
  const out = new Set<string>();
  for (const line of text.split("\n")) {
    const m = /^add \S+ (\S+)/.exec(line.trim());
    if (m) out.add(normalizeMember(m[1]));
  }
  return out;
}

const PROTOCOL_NUMBERS: Record<string, string> = { tcp: "6", udp: "17", sctp: "132" };

function normalizeMember(m: string): string {
  return m
    .split(",")
    .map((p) => {
      const pp = /^(\w+):(\d+)$/.exec(p);
      if (pp) return `${PROTOCOL_NUMBERS[pp[1]] ?? pp[1]}:${pp[2]}`;
      return v6(p);
    })
    .join(",");
}

/** split an iptables-save line on spaces, keeping a double-quoted argument whole */
function tokenize(line: string): string[] {
  const out: string[] = [];
  for (const m of line.matchAll(/"((?:[^"\\]|\\.)*)"|(\S+)/g)) out.push(m[1] !== undefined ? m[1].replace(/\\(.)/g, "$1") : m[2]);
  return out;
}

function withoutComment(tokens: readonly string[]): { comment: string; rest: string[] } {
  const rest = [...tokens];
  const i = rest.indexOf("--comment");
  if (i < 0) return { comment: "", rest };
  const comment = rest[i + 1] ?? "";
  const start = rest[i - 2] === "-m" && rest[i - 1] === "comment" ? i - 2 : i;
  rest.splice(start, i + 2 - start);
  return { comment, rest };
}

const target = (tokens: readonly string[]) => {
  const i = tokens.findIndex((t) => t === "-j" || t === "-g");
  return i < 0 ? "" : (tokens[i + 1] ?? "");
};

/** an address as iptables-save prints it: a host prefix as the bare address, IPv6 compressed, "[v6]:port" too */
function normalizeAddress(a: string): string {
  const hp = /^\[(.*)\]:(\d+)$/.exec(a);
  if (hp) return `[${v6(hp[1])}]:${hp[2]}`;
  const [ip, len] = a.split("/");
  if (len === "32" || len === "128") return v6(ip);
  return len === undefined ? v6(ip) : `${v6(ip)}/${len}`;
}

/** an IPv6 address compressed; anything else (an IPv4 address, "198.19.0.1:8080", a word) as it is */
const v6 = (s: string) => (/^[0-9a-fA-F:.]*:[0-9a-fA-F:.]*:[0-9a-fA-F:.]*$/.test(s) ? canonicalIP(s) : s);

const flagValue = (tokens: readonly string[], flag: string) => {
  const i = tokens.indexOf(flag);
  if (i < 0) return "";
  return `${tokens[i - 1] === "!" ? "!" : ""}${normalizeAddress(tokens[i + 1] ?? "")}`;
};

/** what identifies a rule in both spellings (see the top of this file) */
function signature(comment: string, tokens: readonly string[]): string {
  return [
    comment,
    flagValue(tokens, "-s"),
    flagValue(tokens, "-d"),
    flagValue(tokens, "-p"),
    flagValue(tokens, "--dport"),
    target(tokens),
    flagValue(tokens, "--to-destination"),
  ].join("|");
}

/** the frontend a rule serves: its destination and port ("" in a chain behind the dispatch) */
function ruleFrontend(chain: string, tokens: readonly string[]): string {
  const proto = flagValue(tokens, "-p");
  const port = Number(flagValue(tokens, "--dport"));
  if (!proto || !port || proto.startsWith("!")) return "";
  const d = flagValue(tokens, "-d");
  if (!d) return chain === "KPNG-NODEPORTS" ? frontendName({ protocol: proto, port, nodePort: true }) : "";
  return d.startsWith("!") ? "" : frontendName({ ip: d, protocol: proto, port });
}

const ruleTokens = (r: Rule) => [...r.match, ...r.target];

const missingRule = (family: string, table: string, chain: string, r: Rule) =>
  `${family} ${table} rule -A ${chain}${r.comment ? ` -m comment --comment "${r.comment}"` : ""} ${ruleTokens(r).join(" ")}`;

/** every difference between one family's programmed rules and hairpin set and what the kernel holds */
export function compareRules(
  family: string,
  want: ProgrammedRules,
  saved: Map<string, SavedRule[]>,
  members: Set<string> | undefined,
): Drift[] {
  const out: Drift[] = [];
  const drift = (service: string, frontend: string, kind: Drift["kind"], detail: string) => out.push({ service, frontend, kind, detail });
  for (const [key, c] of want.chains) {
    const [table, chain] = key.split("/");
    const held = saved.get(key);
    const builtin = !chain.startsWith(prefix);
    if (!held && !builtin) {
      drift(c.owner, "", "missing", `${family} ${table} chain ${chain}`);
      // with a fixed chain gone, the Services' rules in it are named too: they say which frontends lost what
      for (const { rule, owner } of c.rules)
        if (owner && owner !== c.owner)
          drift(owner, ruleFrontend(chain, ruleTokens(rule)), "missing", missingRule(family, table, chain, rule));
      continue;
    }
    const left = new Map<string, SavedRule[]>();
    for (const h of held ?? []) {
      const sig = signature(h.comment, h.tokens);
      left.set(sig, [...(left.get(sig) ?? []), h]);
    }
    for (const { rule, owner } of c.rules) {
      const tokens = ruleTokens(rule);
      const sig = signature(rule.comment ?? "", tokens);
      if (left.get(sig)?.shift()) continue;
      drift(owner, ruleFrontend(chain, tokens), "missing", missingRule(family, table, chain, rule));
    }
    for (const rest of left.values())
      for (const h of rest) drift(serviceOfComment(h.comment), ruleFrontend(chain, h.tokens), "extra", `${family} ${table} rule ${h.line}`);
  }
  for (const [key, held] of saved) {
    if (want.chains.has(key) || want.pending?.has(key)) continue;
    const [table, chain] = key.split("/");
    drift(serviceOfComment(held.find((h) => h.comment)?.comment), "", "extra", `${family} ${table} chain ${chain}`);
  }
  if (want.hairpin) {
    const { set } = want.hairpin;
    if (!members) drift("", "", "missing", `ipset ${set}`);
    for (const [m, owner] of want.hairpin.members) if (!members?.has(m)) drift(owner, "", "missing", `ipset ${set} member ${m}`);
    for (const m of members ?? []) if (!want.hairpin.members.has(m)) drift("", "", "extra", `ipset ${set} member ${m}`);
  }
  return out;
}
