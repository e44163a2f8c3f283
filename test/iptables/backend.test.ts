// The backend's life cycle against a recorder: when a restore is full, what a
// full restore does with leftovers it finds in iptables-save, dry run,
// cleanup, UDP conntrack cleanup, and failures.

import { describe, expect, test } from "bun:test";
import { recordingExecutor, type RecordedCall } from "../../plugins/iptables/executor.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { bulkPreamble, bulkThreshold, printRestore, Transaction } from "../../plugins/iptables/render-restore.ts";
import { hashName, maxChainName, serviceChain, servicePortId } from "../../plugins/iptables/names.ts";
import { ep, svc, testConfig, testContext, v4, v6 } from "./fixtures.ts";

const web = svc({
  name: "web",
  clusterIPs: [v4.clusterIP(1), v6.clusterIP(1)],
  ports: [
    { name: "http", port: 80 },
    { name: "dns", protocol: "UDP", port: 53 },
  ],
});
const pod = (i: number) => ep({ ips: [v4.pod(0, i), v6.pod(0, i)], ports: { http: 8080, dns: 5353 } });

function backend(reply?: (c: RecordedCall) => string, opts: { dryRun?: boolean; now?: () => number; fullSyncPeriodMs?: number } = {}) {
  const rec = recordingExecutor(reply);
  const ctx = testContext(testConfig({ dryRun: !!opts.dryRun }));
  const b = new IptablesBackend(ctx, { executor: rec, monitorPeriodMs: 0, now: opts.now, fullSyncPeriodMs: opts.fullSyncPeriodMs });
  b.setService(web);
  b.setEndpoint("default", "web", "a", pod(1));
  return { b, rec, ctx };
}

const argv0 = (rec: { calls: RecordedCall[] }) => rec.calls.map((c) => c.argv[0]);

describe("iptables backend life cycle", () => {
  test("first sync is full: iptables-save then restore, for each family", async () => {
    const { b, rec } = backend();
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
    // then conntrack: UDP flows to service IPs that had no rules before (this process never programmed them)
    expect(argv0(rec).filter((a) => a !== "conntrack")).toHaveLength(8);
    // Per family, in this order (the families side by side): the rules read back, the hairpin set
    // created (the restore's KPNG-POSTROUTING rule names it: its COMMIT waits for the set), the set
    // filled alongside the restore (which a recorder without Executor.stream runs once its COMMIT may go).
    const family = (save: string, restore: string, set: string) =>
      rec.calls.filter((c) => c.argv[0] === save || c.argv[0] === restore || c.stdin?.includes(`${set} `));
    const v4calls = family("iptables-save", "iptables-restore", "KPNG-HAIRPIN-V4");
    const v6calls = family("ip6tables-save", "ip6tables-restore", "KPNG-HAIRPIN-V6");
    expect(v4calls.map((c) => c.argv[0])).toEqual(["iptables-save", "ipset", "ipset", "iptables-restore"]);
    expect(v6calls.map((c) => c.argv[0])).toEqual(["ip6tables-save", "ipset", "ipset", "ip6tables-restore"]);
    expect(v4calls[1]).toEqual({
      argv: ["ipset", "restore"],
      stdin: "create KPNG-HAIRPIN-V4 hash:ip,port,ip family inet maxelem 1048576 -exist\n",
    });
    expect(v4calls[2].stdin).toContain("\nswap KPNG-HAIRPIN-V4-NEW KPNG-HAIRPIN-V4\n");
    expect(v6calls[1].stdin).toContain("create KPNG-HAIRPIN-V6 hash:ip,port,ip family inet6 ");
    expect(v4calls[3].argv).toEqual(["iptables-restore", "--noflush", "-w", "5", "-v"]);
    expect(rec.restores("v6")[0]).toContain("--to-destination [2001:db8:2:0::1]:8080");
    expect(rec.restores("v6")[0]).not.toContain("198.");
    expect(rec.restores("v4")[0]).not.toContain("2001:");
  });

  test("the families sync side by side: one family's restore does not wait for the other's", async () => {
    // The IPv4 restore finishes only once the IPv6 one has started: one after the other, it would time out.
    const v6Started = Promise.withResolvers<void>();
    const rec = recordingExecutor();
    const executor = {
      async run(argv: string[], stdin?: string) {
        if (argv[0] === "ip6tables-restore") v6Started.resolve();
        if (argv[0] === "iptables-restore") {
          let timer: ReturnType<typeof setTimeout> | undefined;
          const alone = new Promise<never>((_, reject) => {
            timer = setTimeout(() => reject(new Error("the IPv4 restore ran alone for 10 s")), 10_000);
          });
          await Promise.race([v6Started.promise, alone]).finally(() => clearTimeout(timer));
        }
        return rec.run(argv, stdin);
      },
    };
    const b = new IptablesBackend(testContext(testConfig({})), { executor, monitorPeriodMs: 0 });
    b.setService(web);
    b.setEndpoint("default", "web", "a", pod(1));
    await b.sync();
    expect(rec.restores("v4")).toHaveLength(1);
    expect(rec.restores("v6")).toHaveLength(1);
  });

  test("a failed restore makes the next sync full, even without changes", async () => {
    let fail = false;
    const { b, rec } = backend(({ argv }) => {
      if (fail && argv[0] === "iptables-restore") throw new Error("iptables-restore: line 3 failed");
      return "";
    });
    await b.sync();
    fail = true;
    b.setEndpoint("default", "web", "b", pod(2));
    await expect(b.sync()).rejects.toThrow("line 3 failed");
    fail = false;
    rec.calls.length = 0;
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
    expect(rec.restores("v4")[0]).toContain("198.19.0.2:8080"); // the change that failed is in
  });

  test("a full restore every fullSyncPeriodMs", async () => {
    let now = 0;
    const { b } = backend(undefined, { now: () => now, fullSyncPeriodMs: 1000 });
    await b.sync();
    now = 500;
    b.setEndpoint("default", "web", "b", pod(2));
    await b.sync();
    expect(b.lastSync?.full).toBe(false);
    now = 1000;
    await b.monitor();
    expect(b.lastSync?.full).toBe(true);
  });

  test("canary gone: the monitor runs a full restore", async () => {
    let canary = true;
    const { b, rec } = backend(({ argv }) => {
      if (argv.includes("KPNG-CANARY") && !canary) throw new Error("No chain/target/match by that name");
      return "";
    });
    await b.sync();
    rec.calls.length = 0;
    await b.monitor(); // canaries present: nothing to do
    expect(argv0(rec).filter((a) => a.endsWith("restore"))).toEqual([]);
    canary = false;
    await b.monitor();
    expect(b.lastSync?.full).toBe(true);
    expect(argv0(rec)).toContain("iptables-restore");
  });

  test("canary gone with the feed listening (Backend.watchRules): reported, and the feed's sync is full", async () => {
    let canary = true;
    const { b, rec } = backend(({ argv }) => {
      if (argv.includes("KPNG-CANARY") && !canary) throw new Error("No chain/target/match by that name");
      return "";
    });
    const reports: string[] = [];
    b.watchRules((r) => reports.push(r));
    await b.sync();
    canary = false;
    rec.calls.length = 0;
    await b.monitor();
    expect(reports).toEqual(["canary chain KPNG-CANARY gone"]);
    expect(argv0(rec).filter((a) => a.endsWith("restore"))).toEqual([]); // the feed syncs, not the monitor
    canary = true;
    await b.sync();
    expect(b.lastSync?.full).toBe(true);
  });

  test("the monitor does nothing before the first sync", async () => {
    const { b, rec } = backend();
    await b.monitor();
    expect(rec.calls).toEqual([]);
  });

  test("full restore: leftover KPNG chains deleted, duplicate and stale jumps removed, foreign rules untouched", async () => {
    const save = [
      "*nat",
      ":PREROUTING ACCEPT [0:0]",
      ":KPNG-SERVICES - [0:0]",
      ":KPNG-SVC-OLDOLDOLDOLDOLDO - [0:0]",
      ":FOREIGN - [0:0]",
      '-A PREROUTING -m comment --comment "kpng service portals" -j KPNG-SERVICES',
      '-A PREROUTING -m comment --comment "kpng service portals" -j KPNG-SERVICES',
      "-A PREROUTING -j FOREIGN",
      "-A OUTPUT -j KPNG-OLD-JUMP",
      "-A FOREIGN -j RETURN",
      "COMMIT",
    ].join("\n");
    const { b, rec } = backend(({ argv }) => (argv[0] === "iptables-save" ? save : ""));
    await b.sync();
    const text = rec.restores("v4")[0];
    const nat = text.slice(text.indexOf("*nat"));
    expect(nat).toContain(":KPNG-SVC-OLDOLDOLDOLDOLDO - [0:0]");
    expect(nat).toContain("-X KPNG-SVC-OLDOLDOLDOLDOLDO");
    // one of the two identical jumps goes, the other stays; the stale one goes
    expect(nat.split("\n").filter((l) => l.startsWith("-D PREROUTING"))).toEqual([
      '-D PREROUTING -m comment --comment "kpng service portals" -j KPNG-SERVICES',
    ]);
    expect(nat).toContain("-D OUTPUT -j KPNG-OLD-JUMP");
    expect(nat).not.toMatch(/-I PREROUTING/);
    expect(nat).toMatch(/-I OUTPUT 1 .* -j KPNG-SERVICES/);
    expect(nat).not.toContain("FOREIGN");
    expect(nat.indexOf("-X ")).toBeGreaterThan(nat.lastIndexOf("-A "));
  });

  test("dry run prints the restore input and runs nothing", async () => {
    const { b, rec, ctx } = backend(undefined, { dryRun: true });
    await b.setup();
    await b.sync();
    expect(rec.calls).toEqual([]);
    const full = (restore: string) => ["# ipset restore", `# ${restore} --noflush`, "# ipset restore"];
    expect(ctx.printed.map((t) => t.split("\n")[0])).toEqual([...full("iptables-restore"), ...full("ip6tables-restore")]);
    b.setEndpoint("default", "web", "b", pod(2));
    await b.sync();
    expect(ctx.printed.length).toBe(10); // per family: the new hairpin member, then the partial restore
    expect(ctx.printed[7]).not.toContain("KPNG-CANARY"); // partial
  });

  test("cleanup removes the jumps and chains iptables-save shows, nothing else", async () => {
    const save = [
      "*filter",
      ":INPUT ACCEPT [0:0]",
      ":KPNG-FIREWALL - [0:0]",
      '-A INPUT -m conntrack --ctstate NEW -m comment --comment "kpng load balancer firewall" -j KPNG-FIREWALL',
      "-A INPUT -j ACCEPT",
      "COMMIT",
    ].join("\n");
    const { b, rec } = backend(({ argv }) => (argv[0] === "iptables-save" ? save : ""));
    await b.cleanup();
    expect(rec.restores("v4")[0]).toBe(
      [
        "*filter",
        '-D INPUT -m conntrack --ctstate NEW -m comment --comment "kpng load balancer firewall" -j KPNG-FIREWALL',
        ":KPNG-FIREWALL - [0:0]",
        "-X KPNG-FIREWALL",
        "COMMIT",
        "",
      ].join("\n"),
    );
    expect(rec.restores("v6")).toEqual([]); // nothing of kpng's in ip6tables-save
    // the hairpin sets go after the rules that matched them
    expect(rec.calls.filter((c) => c.argv[0] === "ipset").map((c) => c.stdin)).toEqual([
      "destroy KPNG-HAIRPIN-V4\n",
      "destroy KPNG-HAIRPIN-V6\n",
    ]);
  });

  test("setup where ipset does not work (program or kernel module missing): a warning, and every endpoint gets a SEP chain (upstream's layout); no ipset call ever", async () => {
    const { b, rec, ctx } = backend(({ argv }) => {
      if (argv[0] === "ipset") throw new Error("ipset: not found");
      return "";
    });
    await b.setup();
    await b.sync();
    expect(ctx.log.lines.some((l) => l.includes("ipset does not work here"))).toBe(true);
    expect(rec.calls.filter((c) => c.argv[0] === "ipset").map((c) => c.argv)).toEqual([["ipset", "restore"]]); // setup's attempt to create the set
    const text = rec.restores("v4").at(-1)!; // after setup's `iptables-restore --version`
    expect(text).toMatch(/^:KPNG-SEP-/m);
    expect(text).not.toContain("--match-set");
  });

  // What `conntrack -L -p udp` answers: one client flow DNATed to each pod, per family.
  const listing = ({ argv }: RecordedCall) => {
    if (argv[0] !== "conntrack" || argv[1] !== "-L") return "";
    const v6 = argv.includes("ipv6");
    const [svcIP, client] = v6 ? ["2001:db8:1::1", "2001:db8:5::1"] : ["198.18.0.1", "198.18.128.1"];
    return [1, 2]
      .map(
        (i, k) =>
          `udp      17 29 src=${client} dst=${svcIP} sport=${40000 + k} dport=53 src=${v6 ? `2001:db8:2::${i}` : `198.19.0.${i}`} dst=${client} sport=5353 dport=${40000 + k} mark=0 use=1`,
      )
      .join("\n");
  };
  const deleted = (calls: RecordedCall[]) =>
    calls.filter((c) => c.argv[0] === "conntrack" && c.argv[1] === "-D").map((c) => c.argv.join(" "));

  test("UDP endpoint removed: only the conntrack flows DNATed to it are deleted, in both families", async () => {
    const { b, rec } = backend(listing);
    b.setEndpoint("default", "web", "b", ep({ ips: [v4.pod(0, 2), "2001:db8:2::2"], ports: { http: 8080, dns: 5353 } }));
    await b.sync();
    rec.calls.length = 0;
    b.deleteEndpoint("default", "web", "a"); // pod 1
    await b.sync();
    const d = deleted(rec.calls);
    expect(d).toHaveLength(2);
    expect(d.some((a) => a.includes("-f ipv4") && a.includes("--orig-port-src 40000"))).toBe(true); // the flow to 198.19.0.1
    expect(d.some((a) => a.includes("-f ipv6") && a.includes("--orig-port-src 40000"))).toBe(true);
  });

  test("UDP service gets its first endpoint: every flow to the service IP is deleted (created while rejected, never DNATed)", async () => {
    const { b, rec } = backend(listing);
    b.deleteEndpoint("default", "web", "a");
    await b.sync();
    rec.calls.length = 0;
    b.setEndpoint("default", "web", "a", pod(1));
    await b.sync();
    expect(deleted(rec.calls).filter((a) => a.includes("-f ipv4"))).toHaveLength(2);
  });

  test("TCP-only changes run no conntrack at all", async () => {
    const { b, rec } = backend(listing);
    b.setService(svc({ name: "tcp", clusterIPs: [v4.clusterIP(7)], ports: [{ name: "http", port: 80 }] }));
    b.setEndpoint("default", "tcp", "a", pod(3));
    await b.sync();
    rec.calls.length = 0;
    b.deleteEndpoint("default", "tcp", "a");
    await b.sync();
    expect(rec.calls.filter((c) => c.argv[0] === "conntrack")).toEqual([]);
  });

  test("setup fails clearly when iptables-restore does not run; IPv6 alone is disabled with a warning", async () => {
    const none = backend(({ argv }) => {
      throw new Error(`${argv[0]}: not found`);
    });
    await expect(none.b.setup()).rejects.toThrow("[unavailable] iptables backend: iptables-restore does not run");
    const no6 = backend(({ argv }) => {
      if (argv[0].startsWith("ip6")) throw new Error("ip6tables-restore: not found");
      return "";
    });
    await no6.b.setup();
    await no6.b.sync();
    expect(no6.rec.calls.filter((c) => c.argv[0].startsWith("ip6")).map((c) => c.argv)).toEqual([["ip6tables-restore", "--version"]]);
    expect(no6.ctx.log.lines.some((l) => l.includes("IPv6 disabled"))).toBe(true);
  });

  test("a table block past bulkThreshold operations starts with the bulk preamble (built-ins declared, -S: iptables-nft's per-chain list off, no -Z); smaller ones do not", () => {
    const tx = new Transaction();
    for (let i = 0; i <= bulkThreshold; i++) tx.declare("nat", `KPNG-T${i}`);
    tx.declare("filter", "KPNG-SMALL");
    const text = printRestore(tx);
    expect(
      text.startsWith(
        "*filter\n:KPNG-SMALL - [0:0]\nCOMMIT\n*nat\n:PREROUTING - [0:0]\n:OUTPUT - [0:0]\n:POSTROUTING - [0:0]\n-S\n:KPNG-T0 - [0:0]\n",
      ),
    ).toBe(true);
    expect(text.match(/^-S$/gm)?.length).toBe(1);
    expect(text).not.toMatch(/^-Z/m);
    expect(bulkPreamble("filter")).toEqual([":INPUT - [0:0]", ":FORWARD - [0:0]", ":OUTPUT - [0:0]", "-S"]);
  });

  test("a bulk restore that fails is retried once without the bulk preamble (a chain iptables-nft cannot parse must not block kpng)", async () => {
    const { b, rec, ctx } = backend(({ argv, stdin }) => {
      if (argv[0] === "iptables-restore" && stdin?.includes("\n-S\n"))
        throw new Error("chain `FOREIGN' in table `nat' is incompatible, use 'nft' tool.");
      return "";
    });
    // 250 services x (SVC chain + masquerade + 2 balancing rules + dispatch) = 1,250 nat operations
    for (let i = 0; i < 250; i++) {
      b.setService(svc({ name: `s${i}`, clusterIPs: [v4.clusterIP(10 + i)], ports: [{ name: "http", port: 80 }] }));
      b.setEndpoint("default", `s${i}`, "a", pod(1));
      b.setEndpoint("default", `s${i}`, "b", pod(2));
    }
    await b.sync();
    const [first, second] = rec.restores("v4");
    const preamble = `*nat\n${bulkPreamble("nat").join("\n")}\n`;
    expect(first).toContain(preamble);
    expect(second).toBe(first.replace(preamble, "*nat\n"));
    expect(ctx.log.lines.some((l) => l.includes("retrying without the bulk preamble"))).toBe(true);
  });

  test("a transaction with an over-long chain name is refused, with the name in the error", () => {
    const tx = new Transaction();
    tx.declare("nat", "KPNG-" + "X".repeat(30));
    tx.declare("nat", "ok");
    expect(tx.error).toContain("KPNG-XXXX");
  });

  test("an address that is not an IP is skipped by the renderer, never printed", async () => {
    const { b, rec } = backend();
    b.setService(
      svc({
        name: "bad",
        externalIPs: ["198.18.64.1 -j ACCEPT"],
        clusterIPs: [v4.clusterIP(3)],
        ports: [{ name: "http", port: 80, nodePort: 30080 }],
      }),
    );
    b.setEndpoint("default", "bad", "a", pod(3));
    await b.sync();
    const text = rec.restores("v4")[0];
    expect(text).toContain("-d 198.18.0.3 ");
    expect(text).not.toContain("198.18.64.1");
  });

  test("chain names: 16 base32 characters after the kind, within iptables' 28", () => {
    const id = servicePortId("a-very-long-namespace-name-of-63-characters-xxxxxxxxxxxxxxxxxxx", "svc", "sctp", 65535);
    for (const kind of ["cluster", "local", "external", "ext", "firewall"] as const) {
      const name = serviceChain(kind, id);
      expect(name).toMatch(/^KPNG-(SVC|SVL|SVX|EXT|FW)-[A-Z2-7]{16}$/);
      expect(name.length).toBeLessThanOrEqual(maxChainName);
    }
    expect(hashName("default/web/tcp/80")).toBe(hashName("default/web/tcp/80"));
    expect(hashName("default/web/tcp/80")).not.toBe(hashName("default/web/tcp/81"));
  });
});
