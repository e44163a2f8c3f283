// What ForeignProxyWatch (foreign.ts) looks at, asked of the kernel so that
// each answer is one object, whatever the size of anyone's ruleset:
//
// - nftables (kube-proxy's nftables mode, and iptables-nft, which keeps
//   iptables' tables as nftables tables `ip mangle`, `ip6 mangle`): one
//   NFT_MSG_GETTABLE / NFT_MSG_GETCHAIN per object, all in one send on a
//   netlink socket (the nft backend's), no process started;
// - iptables-legacy: /proc/net/ip_tables_names (and ip6_) list the legacy
//   tables that exist in this network namespace; only when `mangle` is one of
//   them does `iptables-legacy -t mangle -S KUBE-PROXY-CANARY` run (mangle is
//   small: kube-proxy's rules are in nat and filter). Legacy iptables reads a
//   whole table to list one chain, so nat's KUBE-SERVICES is not asked there:
//   IPVS mode through legacy iptables goes unseen unless it made the canary.

import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "../../core/log.ts";
import type { Executor } from "../backend.ts";
import { errorMessage } from "../../core/errors.ts";
import { type NftObject, nftObjectsExist } from "../../../plugins/nft/index.ts";
import { KUBE_PROXY_CANARY, NFT_TABLES } from "./footprint.ts";
import type { ForeignProbe, Sighting } from "./foreign.ts";

const familyName = (f: string): Sighting["family"] => (f === "ip6" ? "IPv6" : "IPv4");

const iptablesNft = (family: "ip" | "ip6", table: string, chain: string) => ({
  object: { family, table, chain },
  sighting: { proxy: "kube-proxy", rules: "iptables-nft", family: familyName(family), what: `chain ${table} ${chain}` } as Sighting,
});

/**
 * The nftables objects asked for, each with the sighting it means. Through
 * iptables-nft, KUBE-SERVICES of nat is asked too (one object all the same):
 * kube-proxy's IPVS mode is not known to create the canary; of the two, the
 * first found is reported.
 */
const NFT_TARGETS: ReadonlyArray<{ object: NftObject; sighting: Sighting }> = [
  ...NFT_TABLES["kube-proxy"].map((t) => ({
    object: { family: t.family as NftObject["family"], table: t.name },
    sighting: { proxy: "kube-proxy", rules: "nftables", family: familyName(t.family), what: `table ${t.family} ${t.name}` } as Sighting,
  })),
  ...(["ip", "ip6"] as const).map((family) => iptablesNft(family, "mangle", KUBE_PROXY_CANARY)),
  ...(["ip", "ip6"] as const).map((family) => iptablesNft(family, "nat", "KUBE-SERVICES")),
];

const LEGACY_TARGETS: ReadonlyArray<{ names: string; tool: string; sighting: Sighting }> = (["ip", "ip6"] as const).map((family) => ({
  names: `${family}_tables_names`,
  tool: `${family}tables-legacy`,
  sighting: { proxy: "kube-proxy", rules: "iptables-legacy", family: familyName(family), what: `chain mangle ${KUBE_PROXY_CANARY}` },
}));

export interface KernelProbeOptions {
  log: Logger;
  /** runs iptables-legacy (default: on this host) */
  exec?: Executor;
  /** where ip_tables_names is read (default /proc/net: this network namespace's) */
  procNet?: string;
  /** asks the nftables questions; default: the nft backend's netlink socket */
  ask?: (objects: readonly NftObject[]) => Promise<boolean[]>;
}

export function kernelProbe(opts: KernelProbeOptions): ForeignProbe {
  const ask = opts.ask ?? nftObjectsExist;
  /** a part that failed is said once, not every period */
  const said = new Set<string>();
  const cannot = (part: string, err: unknown) => {
    if (said.has(part)) return;
    said.add(part);
    opts.log.warn(`cannot look for another proxy's rules in ${part}`, { err: errorMessage(err) });
  };
  return {
    // one per proxy, rules and family: the gauge's series
    targets: [...NFT_TARGETS.slice(0, 4).map((t) => t.sighting), ...LEGACY_TARGETS.map((t) => t.sighting)],
    async look() {
      const out: Sighting[] = [];
      try {
        const found = await ask(NFT_TARGETS.map((t) => t.object));
        const reported = new Set<string>();
        NFT_TARGETS.forEach((t, i) => {
          const sign = `${t.sighting.rules} ${t.sighting.family}`;
          if (!found[i] || reported.has(sign)) return;
          reported.add(sign);
          out.push(t.sighting);
        });
      } catch (err) {
        cannot("nftables", err);
      }
      for (const t of LEGACY_TARGETS) {
        // no file (no legacy iptables in this kernel) or no mangle: nothing to ask
        const tables = await readFile(join(opts.procNet ?? "/proc/net", t.names), "utf8").catch(() => "");
        if (!tables.split("\n").includes("mangle")) continue;
        try {
          const exec = opts.exec ?? (await import("../../../plugins/iptables/index.ts")).spawnExecutor();
          const present = await exec.run([t.tool, "-w", "5", "-t", "mangle", "-S", KUBE_PROXY_CANARY]).then(
            () => true,
            () => false,
          );
          if (present) out.push(t.sighting);
        } catch (err) {
          cannot(t.tool, err);
        }
      }
      return out;
    },
  };
}
