// The floors a start-up bench prints beside kpng's figures (issue 40, goal
// 2): what loading kpng's own ruleset costs with no proxy at all, by hand,
// into an empty network namespace made for the measure. Figures only.
//
// nft:
//   - `nft -f` of `nft list ruleset` (the node's whole ruleset as kpng left
//     it): nft's parser, evaluator and netlink encoding, plus the kernel;
//   - the kernel's own floor: the same ruleset's netlink batches, captured
//     once as `nft -f` sent them (strace's dump of each sendmsg, as
//     test/nft/netlink-batch-capture.ts captures elements) and replayed
//     byte for byte on a socket of kpng's (plugins/nft/netlink-socket.ts
//     openBatchSocket) into another empty namespace: no text, no rendering,
//     no encoding; the kernel's validation and commit inside send() alone.
//     (kpng's own encoder carries set elements only, netlink-batch.ts; the
//     tables, chains and rules go through nft, so kpng's batch cannot be
//     replayed whole.) One batch of every message is what `nft -f` sends;
//     kpng's first load commits its elements in rounds (fillRounds), which
//     makes the kernel's hash tables grow between sends.
// iptables:
//   - `ipset restore` of `ipset save`, then `iptables-restore` of
//     `iptables-save` and `ip6tables-restore` of `ip6tables-save`;
//   - one DNAT chain rewritten with `ip6tables-restore --noflush` (the nat
//     chain of the dump with the most DNAT rules, declared again with the
//     same rules, as a change rewrites a service's chain), median of several.
//
// Each command runs through `ip netns exec` (a few ms of its own, counted),
// after waiting for a host without nftables event listeners (quietNft: one
// anywhere makes the kernel build an event per element); a figure taken
// while some were left says how many.

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseReplies } from "../plugins/nft/netlink-batch.ts";
import { openBatchSocket } from "../plugins/nft/netlink-socket.ts";

/** how often the one-chain rewrite is measured */
const REWRITES = 7;
const NFNL_MSG_BATCH_BEGIN = 0x10;

interface Timed {
  wallMs: number;
  userMs: number;
  sysMs: number;
}

async function exec(ns: string, argv: string[], stdin?: string): Promise<{ out: string } & Timed> {
  const t0 = performance.now();
  const p = Bun.spawn(["ip", "netns", "exec", ns, ...argv], {
    stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin),
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  const wallMs = performance.now() - t0;
  if (code !== 0) throw new Error(`${argv.join(" ")} in ${ns}: exit ${code}: ${err.slice(0, 2000)}`);
  const cpu = p.resourceUsage()?.cpuTime;
  return { out, wallMs, userMs: Number(cpu?.user ?? 0) / 1000, sysMs: Number(cpu?.system ?? 0) / 1000 };
}

async function withNamespace<T>(f: (ns: string) => Promise<T>): Promise<T> {
  const ns = `kfl${Math.random().toString(36).slice(2, 8)}`;
  const add = Bun.spawnSync(["ip", "netns", "add", ns], { stderr: "pipe" });
  if (add.exitCode !== 0) throw new Error(`ip netns add ${ns}: ${add.stderr.toString()}`);
  try {
    return await f(ns);
  } finally {
    Bun.spawnSync(["ip", "netns", "del", ns]);
  }
}

const ms = (x: number) => `${x.toFixed(0)} ms`;
const cpu = (t: Timed) => `${ms(t.wallMs)} (nft CPU user ${ms(t.userMs)} + sys ${ms(t.sysMs)})`;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

/** The bytes of each sendmsg in strace's `-e write=all` dump (sendto calls, nft's cache questions, are left out). */
export function sentBatches(strace: string): Uint8Array[] {
  const out: Uint8Array[] = [];
  let cur: number[] | null = null;
  const flush = () => {
    if (cur?.length) out.push(Uint8Array.from(cur));
    cur = null;
  };
  for (const line of strace.split("\n")) {
    if (line.startsWith(" | ")) {
      if (!cur) continue;
      const hex = line.slice(10, 10 + 16 * 3 + 1);
      for (const h of hex.trim().split(/\s+/)) if (h) cur.push(Number.parseInt(h, 16));
      continue;
    }
    if (line.startsWith(" * ")) continue;
    flush();
    if (/^(\d+ +)?sendmsg\(/.test(line)) cur = [];
  }
  flush();
  // a batch starts with NFNL_MSG_BATCH_BEGIN (type at offset 4, host order)
  return out.filter((b) => b.length >= 20 && (b[4] | (b[5] << 8)) === NFNL_MSG_BATCH_BEGIN);
}

/** Lines to print: the nft floors of the ruleset now in `nodeNs`. */
export async function nftFloors(nodeNs: string, quiet: () => Promise<number>): Promise<string[]> {
  const ruleset = (await exec(nodeNs, ["nft", "list", "ruleset"])).out;
  const lines: string[] = [];
  const listeners = await quiet();
  const byHand = await withNamespace((ns) => exec(ns, ["nft", "-f", "-"], ruleset));
  lines.push(
    `  floor, by hand: nft -f of kpng's ruleset (nft list ruleset, ${(ruleset.length / 1024).toFixed(0)} KiB) into an empty namespace: ${cpu(byHand)}${listeners ? ` (${listeners} nftables listeners on the host)` : ""}`,
  );
  // the batches nft sends for it, captured in a namespace of their own
  const dir = mkdtempSync(join(tmpdir(), "kpng-floor-"));
  try {
    const trace = join(dir, "strace");
    await withNamespace((ns) =>
      exec(ns, ["strace", "-e", "trace=sendmsg", "-e", "write=all", "-s", "0", "-o", trace, "nft", "-f", "-"], ruleset),
    );
    const batches = sentBatches(readFileSync(trace, "utf8"));
    const bytes = batches.reduce((n, b) => n + b.length, 0);
    const l2 = await quiet();
    const replay = await withNamespace(async (ns) => {
      const socket = openBatchSocket(ns);
      try {
        const t0 = performance.now();
        const errors = batches.flatMap((b) => socket.send(b).flatMap(parseReplies)).filter((r) => r.error !== 0);
        const wall = performance.now() - t0;
        if (errors.length) throw new Error(`replayed batch refused: ${errors[0].error} ${errors[0].message ?? ""}`);
        // the replay loaded what nft did: the same ruleset back
        const back = (await exec(ns, ["nft", "list", "ruleset"])).out;
        return { wall, same: back === ruleset };
      } finally {
        socket.close();
      }
    });
    lines.push(
      `  floor, the kernel's own: the same ruleset's ${batches.length} netlink batch${batches.length === 1 ? "" : "es"} (${(bytes / 1048576).toFixed(1)} MiB, as nft -f sent them) replayed by hand into an empty namespace: ${ms(replay.wall)}${replay.same ? "" : " (the ruleset read back differs!)"}${l2 ? ` (${l2} nftables listeners on the host)` : ""}`,
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return lines;
}

/** the nat chain of an ip6tables-save dump with the most DNAT rules, as a --noflush restore input rewriting it */
export function dnatRewrite(save: string): { chain: string; rules: number; input: string } | undefined {
  const nat = /^\*nat\n([\s\S]*?)^COMMIT$/m.exec(save)?.[1] ?? "";
  const byChain = new Map<string, string[]>();
  for (const line of nat.split("\n")) {
    const m = /^-A (\S+) /.exec(line);
    if (m) byChain.set(m[1], [...(byChain.get(m[1]) ?? []), line]);
  }
  let best: { chain: string; rules: string[]; dnat: number } | undefined;
  for (const [chain, rules] of byChain) {
    const dnat = rules.filter((r) => / -j DNAT /.test(r)).length;
    if (dnat && (!best || dnat > best.dnat)) best = { chain, rules, dnat };
  }
  if (!best) return undefined;
  return { chain: best.chain, rules: best.rules.length, input: `*nat\n:${best.chain} - [0:0]\n${best.rules.join("\n")}\nCOMMIT\n` };
}

/** Lines to print: the iptables floors of the rules and ipsets now in `nodeNs`. */
export async function iptablesFloors(nodeNs: string, quiet: () => Promise<number>): Promise<string[]> {
  const sets = (await exec(nodeNs, ["ipset", "save"])).out;
  const v4 = (await exec(nodeNs, ["iptables-save"])).out;
  const v6 = (await exec(nodeNs, ["ip6tables-save"])).out;
  const listeners = await quiet();
  return withNamespace(async (ns) => {
    const s = await exec(ns, ["ipset", "restore"], sets);
    const a = await exec(ns, ["iptables-restore"], v4);
    const b = await exec(ns, ["ip6tables-restore"], v6);
    const rules = (t: string) => t.split("\n").filter((l) => l.startsWith("-A ")).length;
    const lines = [
      `  floor, by hand into an empty namespace: ipset restore ${ms(s.wallMs)} + iptables-restore ${ms(a.wallMs)} (${rules(v4)} rules) + ip6tables-restore ${ms(b.wallMs)} (${rules(v6)} rules) = ${ms(s.wallMs + a.wallMs + b.wallMs)}${listeners ? ` (${listeners} nftables listeners on the host)` : ""}`,
    ];
    const rewrite = dnatRewrite(v6) ?? dnatRewrite(v4);
    if (!rewrite) return [...lines, "  floor, one DNAT chain: none in the dump"];
    const restore = dnatRewrite(v6) ? "ip6tables-restore" : "iptables-restore";
    const walls: number[] = [];
    for (let i = 0; i < REWRITES; i++) walls.push((await exec(ns, [restore, "--noflush"], rewrite.input)).wallMs);
    lines.push(
      `  floor, one DNAT chain (${rewrite.chain}, ${rewrite.rules} rules) rewritten by hand with ${restore} --noflush: median ${ms(median(walls))} of ${REWRITES} (best ${ms(Math.min(...walls))})`,
    );
    return lines;
  });
}
