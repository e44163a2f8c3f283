// kube-proxy's conntrack sysctls: the formulas (a table), the executor against
// a scratch sysctl tree (never the host's values: only raised, hashsize, the
// read-only cases), and the per-namespace keys as the real kpng process sets
// them inside a network namespace of its own.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  applyConntrack,
  conntrackMax,
  countCPUList,
  detectNumCPU,
  planConntrack,
  type ConntrackConfig,
} from "../../src/core/node/conntrack-sysctl.ts";
import { memoryLogger } from "../../src/core/log.ts";
import { isUnavailable } from "../../src/core/errors.ts";
import { createTopology, type Topology } from "../harness/netns.ts";

const defaults: ConntrackConfig = {
  maxPerCore: 32768,
  min: 131072,
  tcpEstablishedTimeout: "24h0m0s",
  tcpCloseWaitTimeout: "1h0m0s",
  tcpBeLiberal: false,
  udpTimeout: "0s",
  udpStreamTimeout: "0s",
};

describe("nf_conntrack_max: maxPerCore x CPUs, at least min, at most 1Mi (kube-proxy's getConntrackMax)", () => {
  const cases: Array<{ name: string; maxPerCore: number; min: number; cpus: number; want: number }> = [
    { name: "defaults on 2 CPUs: the floor wins (65536 < 131072)", maxPerCore: 32768, min: 131072, cpus: 2, want: 131072 },
    { name: "defaults on 8 CPUs: scaled (262144)", maxPerCore: 32768, min: 131072, cpus: 8, want: 262144 },
    { name: "maxPerCore 0: leave the limit (and ignore min)", maxPerCore: 0, min: 131072, cpus: 8, want: 0 },
    { name: "scaled past 1,048,576: capped", maxPerCore: 32768, min: 131072, cpus: 64, want: 1_048_576 },
    { name: "min above the cap, scaled under it: min", maxPerCore: 1, min: 2_000_000, cpus: 4, want: 2_000_000 },
    { name: "scaled equal to min: min", maxPerCore: 65536, min: 131072, cpus: 2, want: 131072 },
  ];
  for (const c of cases) test(c.name, () => expect(conntrackMax(c, c.cpus)).toBe(c.want));
});

describe("which sysctls are set (planConntrack)", () => {
  const cases: Array<{ name: string; conf: Partial<ConntrackConfig>; want: Array<[string, number]> }> = [
    {
      name: "defaults: established 24h, close-wait 1h; UDP left as is",
      conf: {},
      want: [
        ["nf_conntrack_tcp_timeout_established", 86400],
        ["nf_conntrack_tcp_timeout_close_wait", 3600],
      ],
    },
    { name: "0s timeouts: left as they are", conf: { tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" }, want: [] },
    {
      name: "tcpBeLiberal and UDP timeouts where configured",
      conf: { tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s", tcpBeLiberal: true, udpTimeout: "30s", udpStreamTimeout: "2m0s" },
      want: [
        ["nf_conntrack_tcp_be_liberal", 1],
        ["nf_conntrack_udp_timeout", 30],
        ["nf_conntrack_udp_timeout_stream", 120],
      ],
    },
    {
      name: "sub-second parts are dropped, as Go's Duration / time.Second",
      conf: { tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "1.9s" },
      want: [["nf_conntrack_tcp_timeout_close_wait", 1]],
    },
  ];
  for (const c of cases)
    test(c.name, () => expect(planConntrack({ ...defaults, ...c.conf }, 2).set.map((s) => [s.key, s.value])).toEqual(c.want));
});

test("online CPUs from the kernel's cpulist", () => {
  expect([countCPUList("0-3\n"), countCPUList("0"), countCPUList("0-1,4,6-7")]).toEqual([4, 1, 5]);
});

describe("the executor, against a scratch /proc/sys and /sys", () => {
  let root: string;
  const procSys = () => join(root, "proc-sys");
  const sys = () => join(root, "sys");
  const nf = (key: string) => join(procSys(), "net/netfilter", key);
  const hashsize = () => join(sys(), "module/nf_conntrack/parameters/hashsize");
  const read = (p: string) => readFileSync(p, "utf8").trim();
  const seed = (values: Record<string, number>, hash: number) => {
    root = mkdtempSync(join(tmpdir(), "kpng-sysctl-"));
    mkdirSync(join(procSys(), "net/netfilter"), { recursive: true });
    mkdirSync(join(sys(), "module/nf_conntrack/parameters"), { recursive: true });
    mkdirSync(join(sys(), "devices/system/cpu"), { recursive: true });
    writeFileSync(join(sys(), "devices/system/cpu/online"), "0-3\n");
    for (const [k, v] of Object.entries(values)) writeFileSync(nf(k), `${v}\n`);
    writeFileSync(hashsize(), `${hash}\n`);
  };
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  test("raises nf_conntrack_max and hashsize, sets the timeouts; logs each write", async () => {
    seed({ nf_conntrack_max: 65536, nf_conntrack_tcp_timeout_established: 432000, nf_conntrack_tcp_timeout_close_wait: 60 }, 16384);
    const log = memoryLogger();
    const plan = planConntrack(defaults, await detectNumCPU({ sys: sys() }));
    await applyConntrack(plan, { log, roots: { procSys: procSys(), sys: sys() } });
    // 4 CPUs x 32768 = 131072 = min
    expect([
      read(nf("nf_conntrack_max")),
      read(hashsize()),
      read(nf("nf_conntrack_tcp_timeout_established")),
      read(nf("nf_conntrack_tcp_timeout_close_wait")),
    ]).toEqual(["131072", "32768", "86400", "3600"]);
    expect(log.lines.filter((l) => / INFO test: Set(ting)? /.test(l))).toHaveLength(4);
  });

  test("never lowers nf_conntrack_max or hashsize; writes nothing already right", async () => {
    seed({ nf_conntrack_max: 262144, nf_conntrack_tcp_timeout_established: 86400, nf_conntrack_tcp_timeout_close_wait: 3600 }, 262144);
    const writes: string[] = [];
    await applyConntrack(planConntrack(defaults, 4), {
      log: memoryLogger(),
      roots: { procSys: procSys(), sys: sys() },
      write: async (p) => void writes.push(p),
    });
    expect(writes).toEqual([]);
  });

  test("timeouts are set to exactly the configured value, also downwards (as kube-proxy)", async () => {
    seed({ nf_conntrack_max: 262144, nf_conntrack_tcp_timeout_established: 432000, nf_conntrack_tcp_timeout_close_wait: 60 }, 262144);
    await applyConntrack(planConntrack({ ...defaults, tcpEstablishedTimeout: "2h" }, 4), {
      log: memoryLogger(),
      roots: { procSys: procSys(), sys: sys() },
    });
    expect([read(nf("nf_conntrack_tcp_timeout_established")), read(nf("nf_conntrack_tcp_timeout_close_wait"))]).toEqual(["7200", "3600"]);
  });

  const readOnly = (code: string) => async (p: string) => {
    if (p.endsWith("nf_conntrack_max") || p.endsWith("hashsize")) throw Object.assign(new Error(code), { code });
  };
  for (const code of ["EROFS", "EACCES", "EOPNOTSUPP"]) {
    test(`a node-wide limit not writable from here (${code}): one WARN line, the timeouts still set`, async () => {
      seed({ nf_conntrack_max: 65536, nf_conntrack_tcp_timeout_established: 432000, nf_conntrack_tcp_timeout_close_wait: 3600 }, 16384);
      const log = memoryLogger();
      const written: string[] = [];
      await applyConntrack(planConntrack(defaults, 4), {
        log,
        roots: { procSys: procSys(), sys: sys() },
        write: async (p, t) => {
          await readOnly(code)(p);
          written.push(`${p.split("/").at(-1)}=${t}`);
        },
      });
      expect(log.lines.filter((l) => l.includes(" WARN "))).toEqual([
        expect.stringContaining(`cannot raise the node's conntrack limits from here`),
      ]);
      expect(log.lines.find((l) => l.includes(" WARN "))).toContain(`error=${code}`);
      expect(written).toEqual(["nf_conntrack_tcp_timeout_established=86400"]);
    });
  }

  test("a per-namespace value that cannot be written stops start-up, with kube-proxy's message", async () => {
    seed({ nf_conntrack_max: 262144, nf_conntrack_tcp_timeout_established: 432000 }, 262144);
    let err: unknown;
    try {
      await applyConntrack(planConntrack(defaults, 4), {
        log: memoryLogger(),
        roots: { procSys: procSys(), sys: sys() },
        write: async () => {
          throw Object.assign(new Error("EROFS"), { code: "EROFS" });
        },
      });
    } catch (e) {
      err = e;
    }
    expect(isUnavailable(err)).toBe(true);
    expect(String(err)).toContain(
      "could not set conntrack parameters from kube-proxy configuration: net/netfilter/nf_conntrack_tcp_timeout_established: EROFS",
    );
  });
});

describe("kpng in a network namespace of its own sets the per-namespace keys (real kernel)", () => {
  let topo: Topology;
  const ROOT = join(import.meta.dir, "../..");
  const KEYS = [
    "nf_conntrack_tcp_timeout_established",
    "nf_conntrack_tcp_timeout_close_wait",
    "nf_conntrack_tcp_be_liberal",
    "nf_conntrack_udp_timeout",
    "nf_conntrack_udp_timeout_stream",
  ];
  const hostValues = () => KEYS.map((k) => readFileSync(`/proc/sys/net/netfilter/${k}`, "utf8").trim());
  let before: string[];
  beforeAll(async () => {
    before = hostValues();
    topo = await createTopology({ pods: 1, prefix: "kct" });
  });
  afterAll(() => topo?.destroy());
  /** kpng in the node's namespace, to its end (60 s at most) */
  const kpngInNode = (args: string[]) =>
    Bun.spawn(["ip", "netns", "exec", topo.node.ns, process.execPath, join(ROOT, "src/main.ts"), ...args], {
      cwd: ROOT,
      stdout: "pipe",
      stderr: "pipe",
      timeout: 60_000,
    });

  test("flags and defaults land in the namespace; the host's values do not move", async () => {
    const p = kpngInNode([
      "--input",
      join(ROOT, "examples/cluster.yaml"),
      "--hostname-override=node-1",
      "--proxy-mode=nftables",
      "--once",
      "--healthz-bind-address=",
      "--metrics-bind-address=",
      "--conntrack-tcp-timeout-established=2h",
      "--conntrack-tcp-be-liberal",
      "--conntrack-udp-timeout",
      "45s",
      "--conntrack-udp-timeout-stream=3m",
    ]);
    const [code, err] = await Promise.all([p.exited, new Response(p.stderr).text()]);
    expect(err).not.toContain("ERROR");
    expect(code).toBe(0);
    const inNs = await Promise.all(KEYS.map(async (k) => (await topo.exec(topo.node.ns, ["cat", `/proc/sys/net/netfilter/${k}`])).trim()));
    // established from the flag, close-wait kube-proxy's default (1h), be_liberal 1, UDP 45s and 3m
    expect(inNs).toEqual(["7200", "3600", "1", "45", "180"]);
    expect(err).toMatch(/INFO kpng: Set sysctl entry=net\/netfilter\/nf_conntrack_tcp_timeout_established value=7200/);
    expect(hostValues()).toEqual(before);
  }, 90_000);

  test("--init-only: the sysctls, then exit 0, no rules", async () => {
    await topo.exec(topo.node.ns, ["nft", "flush", "ruleset"]); // the run above left kpng's tables in this namespace
    const p = kpngInNode(["--init-only", "--hostname-override=node-1", "--conntrack-udp-timeout=50s"]);
    expect(await p.exited).toBe(0);
    expect((await topo.exec(topo.node.ns, ["cat", "/proc/sys/net/netfilter/nf_conntrack_udp_timeout"])).trim()).toBe("50");
    expect(await topo.exec(topo.node.ns, ["nft", "list", "tables"])).not.toContain("kpng");
    expect(hostValues()).toEqual(before);
  }, 90_000);
});
