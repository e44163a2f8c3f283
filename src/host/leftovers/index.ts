// The leftovers sweep: lists the node (nftables tables, iptables-legacy and
// iptables-nft rules of both families, ipsets, the IPVS device and virtual
// servers), plans what to remove (plan.ts, pure) and runs the plan. Used twice:
//
// - `--cleanup`: kpng's rules of every backend and kube-proxy's of every mode;
// - at start-up, once kpng's first sync is in: kube-proxy's rules (a node
//   migrating from kube-proxy); docs/operators.md, "Replace kube-proxy" says why
//   that order leaves no moment in which a Service answers from neither.
//
// Every step is best effort, as kube-proxy's cleanup is: a tool that is
// missing or has nothing to list is skipped, a step that fails is reported
// and the next one runs.

import { errorMessage } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import type { Executor } from "../backend.ts";
import { FAMILIES, type Family } from "../toolkit/index.ts";
import { IPVS_DEVICE, NFT_TABLES, type Owner } from "./footprint.ts";
import { emptyPlan, planLeftovers, type Flavour, type IptablesDump, type Listing, type Plan } from "./plan.ts";

export type { Owner } from "./footprint.ts";
export type { Plan } from "./plan.ts";

const FLAVOURS: readonly Flavour[] = ["legacy", "nft"];
const iptablesTool = (family: Family, flavour: Flavour, what: "save" | "restore") =>
  `${family === "v4" ? "iptables" : "ip6tables"}-${flavour}-${what}`;

/** Reads what the sweep needs; a tool that fails (missing, no IPVS in the kernel, no such device) reads as nothing. */
export async function listNode(exec: Executor): Promise<Listing> {
  const read = (argv: string[]) => exec.run(argv).catch(() => "");
  const iptables: IptablesDump[] = [];
  for (const flavour of FLAVOURS)
    for (const family of FAMILIES) {
      const save = await read([iptablesTool(family, flavour, "save")]);
      if (save.trim()) iptables.push({ flavour, family, save });
    }
  const device = await read(["ip", "-j", "-d", "link", "show", IPVS_DEVICE]);
  return {
    nftTables: await nftTablesPresent(exec),
    iptables,
    ipsets: await read(["ipset", "save"]),
    device,
    deviceAddrs: device.trim() ? await read(["ip", "-j", "addr", "show", "dev", IPVS_DEVICE]) : "",
    ipvs: await read(["ipvsadm", "-Sn"]),
  };
}

/**
 * The owners' nftables tables that exist, as `nft list tables` prints them.
 * nft 1.0.6's `list tables` reads every chain, rule and set of every table
 * (iptables-nft's too, and kube-proxy's anonymous vmaps, one per service),
 * so each table is found by listing one object kube-proxy and kpng make with
 * it, in the same transaction: the `cluster-ips` set, which nft reads alone;
 * else the `nat-prerouting` chain (reading a chain reads the table's sets).
 */
async function nftTablesPresent(exec: Executor): Promise<string> {
  const lists = (argv: string[]) =>
    exec.run(argv).then(
      () => true,
      () => false,
    );
  let out = "";
  for (const owner of ["kube-proxy", "kpng"] as const)
    for (const t of NFT_TABLES[owner]) {
      const found =
        (await lists(["nft", "list", "set", t.family, t.name, "cluster-ips"])) ||
        (await lists(["nft", "list", "chain", t.family, t.name, "nat-prerouting"]));
      if (found) out += `table ${t.family} ${t.name}\n`;
    }
  return out;
}

/** The plan's commands in order: nftables, iptables, IPVS, the device, then the ipsets the removed rules matched. */
export function planCommands(plan: Plan): Array<{ argv: string[]; stdin?: string }> {
  return [
    ...(plan.nft ? [{ argv: ["nft", "-f", "-"], stdin: plan.nft }] : []),
    ...plan.iptables.map((s) => ({ argv: [iptablesTool(s.family, s.flavour, "restore"), "--noflush", "-w", "5"], stdin: s.input })),
    ...(plan.ipvs ? [{ argv: ["ipvsadm", "-R"], stdin: plan.ipvs }] : []),
    ...(plan.deleteDevice ? [{ argv: ["ip", "link", "del", IPVS_DEVICE] }] : []),
    ...plan.ipsets.map((s) => ({ argv: ["ipset", "destroy", s] })),
  ];
}

export interface SweepOptions {
  exec: Executor;
  log: Logger;
  owners: readonly Owner[];
  /** kpng runs its IPVS backend: kube-ipvs0 and the virtual servers stay */
  keepIpvs?: boolean;
  /** print the commands to `out` instead of running them */
  dryRun?: boolean;
  out?: (text: string) => void;
}

export interface SweepResult {
  plan: Plan;
  /** the commands that failed, one line each */
  failures: string[];
  /** of the plan's removals, kube-proxy's (when its rules were among the owners'), one line each */
  kubeProxyRemoved: string[];
}

/** Lists, plans and removes; logs what went and what stayed. */
export async function removeLeftovers(opts: SweepOptions): Promise<SweepResult> {
  const { log } = opts;
  const listing = await listNode(opts.exec);
  const plan = planLeftovers(listing, { owners: opts.owners, keepIpvs: opts.keepIpvs });
  for (const k of plan.kept) log.info("leftovers: kept", { what: k });
  const failures: string[] = [];
  // kube-proxy's part, planned alone on the same listing (pure; the sweep itself stays one plan)
  let kubeProxyRemoved: string[] = [];
  if (opts.owners.includes("kube-proxy"))
    kubeProxyRemoved =
      opts.owners.length === 1 ? plan.removed : planLeftovers(listing, { owners: ["kube-proxy"], keepIpvs: opts.keepIpvs }).removed;
  if (emptyPlan(plan)) return { plan, failures, kubeProxyRemoved };
  for (const cmd of planCommands(plan)) {
    if (opts.dryRun) {
      opts.out?.(`# ${cmd.argv.join(" ")}\n${cmd.stdin ?? ""}`);
      continue;
    }
    try {
      await opts.exec.run(cmd.argv, cmd.stdin);
    } catch (err) {
      failures.push(`${cmd.argv.join(" ")}: ${errorMessage(err).split("\n")[0]}`);
    }
  }
  for (const f of failures) log.warn("leftovers: a removal failed", { err: f });
  if (!opts.dryRun) log.info("leftovers removed", { owners: opts.owners.join(","), removed: plan.removed.join("; ") });
  return { plan, failures, kubeProxyRemoved };
}

/** Real processes on this host (kpng runs in the node's network namespace). */
const hostExecutor = async (): Promise<Executor> => (await import("../../../plugins/iptables/index.ts")).spawnExecutor();

/**
 * Start-up, after every backend's first sync: kube-proxy's rules of every
 * mode go. kpng's IPVS backend, when it runs, has taken over kube-ipvs0 and
 * the virtual servers in that sync, so they stay.
 */
export async function migrateFromKubeProxy(o: { log: Logger; backends: readonly string[]; exec?: Executor }): Promise<SweepResult> {
  return removeLeftovers({
    exec: o.exec ?? (await hostExecutor()),
    log: o.log,
    owners: ["kube-proxy"],
    keepIpvs: o.backends.includes("ipvs"),
  });
}

/** `--cleanup`: kpng's rules of every backend and kube-proxy's of every mode, in both iptables flavours and families. */
export async function cleanupEveryMode(o: {
  log: Logger;
  dryRun?: boolean;
  out?: (text: string) => void;
  exec?: Executor;
}): Promise<SweepResult> {
  return removeLeftovers({
    exec: o.exec ?? (await hostExecutor()),
    log: o.log,
    owners: ["kpng", "kube-proxy"],
    dryRun: o.dryRun,
    out: o.out,
  });
}
