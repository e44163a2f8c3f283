// kube-proxy's ipvs fields, applied as upstream's ipvs proxier applies them:
// strictARP's sysctls (recorded, then written for real in a namespace),
// the connection timeouts through `ipvsadm --set`, and excludeCIDRs keeping
// virtual servers out of the clean-up of stale ones.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { createIpvsBackend } from "../../plugins/ipvs/backend.ts";
import { recorder } from "../harness/command-recorder.ts";
import { excludedAddresses, timeoutsArgv } from "../../plugins/ipvs/settings.ts";
import { EXAMPLE_NODE_1 } from "../harness/kpng-process.ts";
import { run } from "../harness/netns.ts";
import { v4 } from "../fixtures/addresses.ts";
import { applyAndRecord, rig, testConfig } from "./harness.ts";
import { endpoint, entry, nodeState, service } from "./services.ts";

const C = (i: number) => v4.clusterIP(i);
const ipvs = (o: Partial<Config["ipvs"]>): Partial<Config> => ({
  ipvs: { scheduler: "rr", syncPeriodSeconds: 30, minSyncPeriodSeconds: 0, ...o },
});
const web = (i: number) =>
  entry(service({ name: `web-${i}`, clusterIPs: [C(i)], ports: [{ name: "http", port: 80, targetPort: 8080 }] }), {
    a: endpoint({ ips: [v4.pod(2, 1)] }),
  });
const sysctlLine = (r: ReturnType<typeof rig>) => r.rec.find("sysctl").map((c) => c.argv.join(" "));

describe("ipvs.strictARP", () => {
  test("on: arp_ignore=1 and arp_announce=2 join the sysctls IPVS mode sets at start-up", async () => {
    const r = rig(testConfig(ipvs({ strictARP: true })));
    await r.backend.setup();
    expect(sysctlLine(r)).toEqual([
      "sysctl -w net.ipv4.vs.conntrack=1 net.ipv4.vs.expire_nodest_conn=1 net.ipv4.vs.expire_quiescent_template=1 net.ipv4.ip_forward=1 net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2",
    ]);
  });

  test("off (the default): ARP is left as the node has it", async () => {
    const r = rig(testConfig());
    await r.backend.setup();
    expect(sysctlLine(r)[0]).not.toContain("arp_");
  });

  test("a sysctl that cannot be set fails start-up, as upstream's does", async () => {
    const r = rig(testConfig(ipvs({ strictARP: true })), { fail: (argv) => argv[0] === "sysctl" });
    expect(r.backend.setup()).rejects.toThrow(/arp_ignore=1/);
  });
});

describe("ipvs.strictARP: written for real in a network namespace", () => {
  const ns = `kpipvs${Math.random().toString(36).slice(2, 8)}`;
  const arp = (key: string) => run(["ip", "netns", "exec", ns, "sysctl", "-n", `net.ipv4.conf.all.${key}`]).then((t) => t.trim());
  const hostArp = (key: string) => readFileSync(`/proc/sys/net/ipv4/conf/all/${key}`, "utf8").trim();
  beforeAll(() => run(["ip", "netns", "add", ns]));
  afterAll(() => run(["ip", "netns", "del", ns]).catch(() => {}));

  test("the node's namespace gets arp_ignore=1, arp_announce=2; the host's are untouched", async () => {
    const host = [hostArp("arp_ignore"), hostArp("arp_announce")];
    expect([await arp("arp_ignore"), await arp("arp_announce")]).toEqual(["0", "0"]);
    // IPVS is absent from this kernel: ipvsadm, ip link and the net.ipv4.vs.* keys (which exist only with
    // the ip_vs module) are recorded; every other sysctl runs in the namespace as the backend wrote it.
    const rec = recorder();
    const executor = {
      run: async (argv: string[], stdin?: string) => {
        if (argv[0] !== "sysctl") return rec.run(argv, stdin);
        return run(["ip", "netns", "exec", ns, ...argv.filter((a) => !a.startsWith("net.ipv4.vs."))]);
      },
    };
    const backend = createIpvsBackend(
      { config: testConfig(ipvs({ strictARP: true })), log: memoryLogger(), out: () => {} },
      { executor, drainIntervalMs: 0 },
    );
    await backend.setup();
    await backend.close();
    expect([await arp("arp_ignore"), await arp("arp_announce")]).toEqual(["1", "2"]);
    expect([hostArp("arp_ignore"), hostArp("arp_announce")]).toEqual(host);
  });
});

describe("ipvs timeouts", () => {
  const cases: { name: string; o: Partial<Config["ipvs"]>; want: string[] | undefined }[] = [
    { name: "none set (0s, the default): the kernel's are left alone, no ipvsadm --set", o: {}, want: undefined },
    {
      name: "tcpTimeout 15m alone: the others stay as they are (0)",
      o: { tcpTimeoutSeconds: 900 },
      want: ["ipvsadm", "--set", "900", "0", "0"],
    },
    {
      name: "all three, fractions cut to whole seconds",
      o: { tcpTimeoutSeconds: 7200, tcpFinTimeoutSeconds: 30.9, udpTimeoutSeconds: 300 },
      want: ["ipvsadm", "--set", "7200", "30", "300"],
    },
  ];
  for (const c of cases) test(c.name, () => expect(timeoutsArgv(testConfig(ipvs(c.o)))).toEqual(c.want));

  test("setup runs ipvsadm --set after the sysctls; a failure is logged and start-up goes on (upstream's)", async () => {
    const r = rig(testConfig(ipvs({ tcpTimeoutSeconds: 900, udpTimeoutSeconds: 60 })), { fail: (argv) => argv[1] === "--set" });
    await r.backend.setup();
    const argvs = r.rec.commands.map((c) => c.argv.join(" "));
    expect(argvs.indexOf("ipvsadm --set 900 0 60")).toBe(argvs.findIndex((a) => a.startsWith("sysctl")) + 1);
    expect(r.log.lines.filter((l) => l.includes("Failed to configure IPVS timeouts"))).toHaveLength(1);
    expect(argvs).toContain("ip link show kube-ipvs0");
  });

  test("without timeouts, setup runs no ipvsadm --set", async () => {
    const r = rig(testConfig());
    await r.backend.setup();
    expect(r.rec.find("ipvsadm", "--set")).toEqual([]);
  });
});

describe("ipvs.excludeCIDRs", () => {
  const excluded = "198.18.0.0/28"; // cluster IPs C(0)..C(15); C(77) is outside
  test("the matcher: inside the CIDR, either family; nothing when none", () => {
    const inside = excludedAddresses([excluded, "2001:db8:ffff::/48"]);
    expect([inside(C(9)), inside(C(77)), inside("2001:db8:ffff::1"), inside("2001:db8::1")]).toEqual([true, false, true, false]);
    expect(excludedAddresses([])(C(9))).toBe(false);
  });

  test("full sync: a stale virtual server inside excludeCIDRs is kept, one outside is deleted", async () => {
    const kept = C(10);
    const stale = C(77);
    expect([excludedAddresses([excluded])(kept), excludedAddresses([excluded])(stale)]).toEqual([true, false]);
    const answers: Record<string, string> = {
      "ipvsadm -Sn": `-A -t ${kept}:80 -s rr\n-A -t ${stale}:80 -s rr\n`,
      "ipset save": `add KPNG-CLUSTER-IP ${kept},tcp:80\nadd KPNG-CLUSTER-IP ${stale},tcp:80\n`,
      "ip -j addr show dev kube-ipvs0": JSON.stringify([
        { ifname: "kube-ipvs0", addr_info: [kept, stale].map((local) => ({ local, scope: "global" })) },
      ]),
    };
    const withExclude = rig(testConfig(ipvs({ excludeCIDRs: [excluded] })), { answer: (argv) => answers[argv.join(" ")] });
    expect((await applyAndRecord(withExclude, nodeState(1, []), null)).ipvs).toEqual([`-D -t ${stale}:80`]);
    // the same kernel without the setting: both go (today's behaviour for kpng's own)
    const without = rig(testConfig(), { answer: (argv) => answers[argv.join(" ")] });
    expect((await applyAndRecord(without, nodeState(1, []), null)).ipvs.sort()).toEqual([`-D -t ${kept}:80`, `-D -t ${stale}:80`]);
  });

  test("partial sync: a deleted service's virtual server inside excludeCIDRs stays; a wanted one is still synced", async () => {
    const inside = 10;
    expect(excludedAddresses([excluded])(C(inside))).toBe(true);
    const r = rig(testConfig(ipvs({ excludeCIDRs: [excluded] })));
    const state = nodeState(1, [web(inside)]);
    const first = await applyAndRecord(r, state, null);
    expect(first.ipvs).toContain(`-A -t ${C(inside)}:80 -s rr`); // wanted: added as any other
    const gone = await applyAndRecord(r, nodeState(2, []), new Set([web(inside)[0]]));
    expect(gone.ipvs).toEqual([]);
    // outside the CIDR the same deletion deletes
    const r2 = rig(testConfig());
    await applyAndRecord(r2, state, null);
    expect((await applyAndRecord(r2, nodeState(2, []), new Set([web(inside)[0]]))).ipvs).toEqual([`-D -t ${C(inside)}:80`]);
  });
});

describe("as deployed: kube-proxy's ipvs flags reach the backend (the whole process, --dry-run)", () => {
  test("--ipvs-strict-arp and the timeouts are printed as run; the only WARN is IPVS mode's deprecation", () => {
    const root = join(import.meta.dir, "../..");
    const r = Bun.spawnSync(
      [
        process.execPath,
        join(root, "src/main.ts"),
        "--proxy-mode=ipvs",
        "--ipvs-strict-arp",
        "--ipvs-tcp-timeout=15m",
        "--ipvs-udp-timeout=1m",
        "--ipvs-exclude-cidrs=203.0.113.0/24",
        ...EXAMPLE_NODE_1,
        "--dry-run",
        "--once",
      ],
      { cwd: root },
    );
    const out = r.stdout.toString();
    expect(r.exitCode).toBe(0);
    expect(out).toMatch(/^# sysctl -w .* net\.ipv4\.conf\.all\.arp_ignore=1 net\.ipv4\.conf\.all\.arp_announce=2$/m);
    expect(out).toContain("# ipvsadm --set 900 0 60\n");
    const warns = r.stderr
      .toString()
      .split("\n")
      .filter((l) => l.includes(" WARN "));
    expect(warns).toEqual([expect.stringContaining("The ipvs proxier is now deprecated")]);
  }, 60_000);
});
