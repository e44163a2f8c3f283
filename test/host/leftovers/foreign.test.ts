// The foreign-proxy watch (src/host/leftovers/foreign.ts) and its probe
// (foreign-probe.ts) against recorders: what is said when, what the gauge is
// told, which questions are asked. The real kernel and the real kube-proxy:
// two-proxies.test.ts.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { memoryLogger } from "../../../src/core/log.ts";
import type { NftObject } from "../../../plugins/nft/netlink-batch.ts";
import { ForeignProxyWatch, type Sighting, sightingKey } from "../../../src/host/leftovers/foreign.ts";
import { kernelProbe } from "../../../src/host/leftovers/foreign-probe.ts";

const table: Sighting = { proxy: "kube-proxy", rules: "nftables", family: "IPv4", what: "table ip kube-proxy" };
const canary: Sighting = { proxy: "kube-proxy", rules: "iptables-nft", family: "IPv6", what: "chain mangle KUBE-PROXY-CANARY" };

/** a watch over a probe that answers `rounds` one after the other, with what it reported */
function watchOver(rounds: Sighting[][]) {
  const log = memoryLogger();
  const reports: string[] = [];
  let i = 0;
  const watch = new ForeignProxyWatch({
    probe: { targets: [table, canary], look: async () => rounds[Math.min(i++, rounds.length - 1)] },
    log,
    report: (s, present) => reports.push(`${sightingKey(s)}=${present ? 1 : 0}`),
    periodMs: 1e9,
  });
  return { watch, log, reports };
}

const warnings = (lines: string[]) => lines.filter((l) => l.includes("WARN") && l.includes("another proxy is programming this node"));

describe("ForeignProxyWatch", () => {
  test("every sign starts at 0; a sign seen is one WARN naming it and 1; still there: nothing more; gone: INFO and 0", async () => {
    const { watch, log, reports } = watchOver([[], [table], [table], []]);
    watch.start(); // reports the targets, and looks once
    await watch.check();
    expect(reports).toEqual(["nftables IPv4 table ip kube-proxy=0", "iptables-nft IPv6 chain mangle KUBE-PROXY-CANARY=0"]);
    await watch.check();
    await watch.check();
    expect(warnings(log.lines).length).toBe(1);
    expect(warnings(log.lines)[0]).toContain('saw="table ip kube-proxy"');
    expect(warnings(log.lines)[0]).toContain("rules=nftables family=IPv4");
    expect(reports.at(-1)).toBe("nftables IPv4 table ip kube-proxy=1");
    await watch.check();
    watch.stop();
    expect(reports.at(-1)).toBe("nftables IPv4 table ip kube-proxy=0");
    expect(log.lines.some((l) => l.includes("kube-proxy's rules are gone again"))).toBe(true);
  });

  test("two signs at once: one WARN each", async () => {
    const { watch, log } = watchOver([[table, canary]]);
    await watch.check();
    expect(warnings(log.lines).length).toBe(2);
  });

  test("looks never overlap: a check asked while one runs joins it", async () => {
    let looks = 0;
    const watch = new ForeignProxyWatch({
      probe: { targets: [], look: async () => (looks++, await Bun.sleep(20), []) },
      log: memoryLogger(),
    });
    await Promise.all([watch.check(), watch.check(), watch.check()]);
    expect(looks).toBe(1);
  });
});

describe("kernelProbe", () => {
  const dir = mkdtempSync(join(tmpdir(), "kpng-foreign-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  test("asks for kube-proxy's nftables tables and iptables-nft's mangle canary, one object each, and names what it found", async () => {
    const asked: NftObject[][] = [];
    const probe = kernelProbe({
      log: memoryLogger(),
      procNet: dir, // no legacy tables here
      ask: async (objects) => (asked.push([...objects]), objects.map((o) => o.family === "ip6" && o.chain !== undefined)),
    });
    expect(await probe.look()).toEqual([canary]);
    expect(asked).toEqual([
      [
        { family: "ip", table: "kube-proxy" },
        { family: "ip6", table: "kube-proxy" },
        { family: "ip", table: "mangle", chain: "KUBE-PROXY-CANARY" },
        { family: "ip6", table: "mangle", chain: "KUBE-PROXY-CANARY" },
        { family: "ip", table: "nat", chain: "KUBE-SERVICES" },
        { family: "ip6", table: "nat", chain: "KUBE-SERVICES" },
      ],
    ]);
  });

  test("iptables-nft: the canary or nat's KUBE-SERVICES (IPVS mode), one sighting per family, the canary named first", async () => {
    const probe = (found: (o: NftObject) => boolean) =>
      kernelProbe({ log: memoryLogger(), procNet: dir, ask: async (objects) => objects.map(found) });
    const ipvsLike = await probe((o) => o.chain === "KUBE-SERVICES" && o.family === "ip").look();
    expect(ipvsLike).toEqual([{ proxy: "kube-proxy", rules: "iptables-nft", family: "IPv4", what: "chain nat KUBE-SERVICES" }]);
    const both = await probe((o) => o.chain !== undefined && o.family === "ip6").look();
    expect(both).toEqual([canary]);
    expect(probe(() => false).targets.map(sightingKey)).toEqual([
      "nftables IPv4 table ip kube-proxy",
      "nftables IPv6 table ip6 kube-proxy",
      "iptables-nft IPv4 chain mangle KUBE-PROXY-CANARY",
      "iptables-nft IPv6 chain mangle KUBE-PROXY-CANARY",
      "iptables-legacy IPv4 chain mangle KUBE-PROXY-CANARY",
      "iptables-legacy IPv6 chain mangle KUBE-PROXY-CANARY",
    ]);
  });

  test("iptables-legacy is asked only when its mangle table exists in this namespace, and only about the canary", async () => {
    writeFileSync(join(dir, "ip_tables_names"), "filter\nmangle\n");
    writeFileSync(join(dir, "ip6_tables_names"), "filter\n");
    const calls: string[] = [];
    const probe = kernelProbe({
      log: memoryLogger(),
      procNet: dir,
      ask: async (objects) => objects.map(() => false),
      exec: { run: async (argv) => (calls.push(argv.join(" ")), "") },
    });
    expect(await probe.look()).toEqual([
      { proxy: "kube-proxy", rules: "iptables-legacy", family: "IPv4", what: "chain mangle KUBE-PROXY-CANARY" },
    ]);
    expect(calls).toEqual(["iptables-legacy -w 5 -t mangle -S KUBE-PROXY-CANARY"]);
  });

  test("a part that cannot be asked is said once, and the rest still looked at", async () => {
    const log = memoryLogger();
    const probe = kernelProbe({
      log,
      procNet: join(dir, "none"),
      ask: async () => {
        throw new Error("netlink: socket failed");
      },
    });
    expect(await probe.look()).toEqual([]);
    expect(await probe.look()).toEqual([]);
    expect(log.lines.filter((l) => l.includes("cannot look for another proxy's rules in nftables")).length).toBe(1);
  });
});
