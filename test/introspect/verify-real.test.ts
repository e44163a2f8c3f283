// `kpng verify` as deployed (issue 36, done-when): the whole kpng process
// with an operator's flags (--kubeconfig, --node-name, --backend, --listen on
// a unix socket), following the real kube-apiserver 1.36.2, once with nft and
// once with iptables, each in a node namespace of its own. After the first
// sync the kernel holds what was programmed: exit 0. Then one kernel object
// of one Service is deleted by hand:
// - iptables: the Service's cluster-IP rule in KPNG-SERVICES. The canary
//   chains do not see it, so `kpng verify` names the Service and frontend,
//   exit 1, until the next full restore (hourly); another Service is clean.
// - nft: the Service's element in the service-ips map. kpng's watch sees the
//   commit at once and repairs within milliseconds, after reading back what
//   was lost (src/host/feed.ts): there is no flag to keep it from
//   repairing, so the loss is seen in the WARN line naming the Service and
//   frontend and in the drift gauge, and `kpng verify` then finds the kernel
//   repaired, exit 0.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc } from "../fixtures/k8s.ts";
import { kpngCommand, ROOT, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { apiForNode, haveK8s, sharedApiServer, type KubeApiServer } from "../harness/kube-apiserver.ts";
import { run } from "../harness/netns.ts";

const NS = "kpng-vreal";
const WEB = v4.clusterIP(241);
const OTHER = v4.clusterIP(242);
const BACKENDS = ["nft", "iptables"] as const;
type BackendName = (typeof BACKENDS)[number];

/** `kpng verify ...` as an operator runs it on the node: its exit code and output */
async function kpng(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn([...kpngCommand(), ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

/** the table's rows, split into their first four columns (BACKEND SERVICE FRONTEND DRIFT) */
const rows = (out: string) =>
  out
    .trimEnd()
    .split("\n")
    .slice(1)
    .map((l) => l.split(/\s+/).slice(0, 4));

/** until `ok()` holds, bounded (the machine is shared and loaded); the last value */
async function until<T>(what: () => Promise<T>, ok: (v: T) => boolean, ms = 30_000): Promise<T> {
  const end = performance.now() + ms;
  for (;;) {
    const v = await what();
    if (ok(v) || performance.now() > end) return v;
    await Bun.sleep(200);
  }
}

const real = haveK8s("kpng verify against the real kube-apiserver");

/** one node: its namespace, kpng with one backend, its API socket */
interface Node {
  netns: string;
  sock: string;
  proc: KpngProcess;
  /** a command inside the node namespace, its stdout */
  exec(argv: string[]): Promise<string>;
}

describe.skipIf(!real)("kpng verify as deployed: the kernel read back through the running kpng (real kube-apiserver)", () => {
  let api: KubeApiServer;
  const dir = tempDir("kpng-vreal-");
  const stops: Array<() => Promise<unknown>> = [];
  const nodes = {} as Record<BackendName, Node>;
  const suffix = Math.random().toString(36).slice(2, 6);

  beforeAll(async () => {
    dir.create();
    api = await sharedApiServer();
    const started = BACKENDS.map(async (backend) => {
      const netns = `kpvr${backend.slice(0, 3)}${suffix}`;
      await run(["ip", "netns", "add", netns]);
      await run(["ip", "-n", netns, "link", "set", "lo", "up"]);
      const nodeApi = await apiForNode(netns, join(dir.path, `kubeconfig-${backend}`), { api });
      stops.push(nodeApi.stop, () => run(["ip", "netns", "del", netns]));
      return { backend, netns, kubeconfig: nodeApi.kubeconfig };
    });
    const rigs = await Promise.all(started);
    await api.apply(
      ...BACKENDS.map((b, i) => node(`node-v${b}`, { ips: [v4.node(1 + i)] })),
      svc({ ns: NS, name: "web", clusterIPs: [WEB], ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] }),
      svc({ ns: NS, name: "other", clusterIPs: [OTHER], ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] }),
      slice({ ns: NS, service: "web", endpoints: [{ ip: v4.pod(1, 241), node: "node-a", pod: "web-a" }] }),
      slice({ ns: NS, service: "other", endpoints: [{ ip: v4.pod(1, 242), node: "node-a", pod: "other-a" }] }),
    );
    for (const { backend, netns, kubeconfig } of rigs) {
      const sock = `unix://${join(dir.path, `${backend}.sock`)}`;
      const proc = startKpng(["--kubeconfig", kubeconfig, "--node-name", `node-v${backend}`, "--backend", backend, "--listen", sock], {
        wrap: ["ip", "netns", "exec", netns],
      });
      const exec = (argv: string[]) => run(["ip", "netns", "exec", netns, ...argv]);
      nodes[backend] = { netns, sock, proc, exec };
    }
    // both Services in the kernel (the first sync may come before the API server's last object)
    await Promise.all(BACKENDS.map((b) => nodes[b].proc.waitFor(/ INFO kpng: synced /, 90_000)));
    await until(
      () => nodes.nft.exec(["nft", "list", "map", "ip", "kpng", "service-ips"]),
      (out) => out.includes(WEB) && out.includes(OTHER),
    );
    await until(
      () => nodes.iptables.exec(["iptables-save", "-t", "nat"]),
      (out) => out.includes(`-d ${WEB}/32`) && out.includes(`-d ${OTHER}/32`),
    );
  }, 180_000);

  afterAll(async () => {
    for (const b of BACKENDS) await nodes[b]?.proc.stop("SIGKILL");
    for (const s of stops) await s().catch(() => {});
    await api?.kubectl(["delete", "namespace", NS, "--wait=false", "--ignore-not-found"]).catch(() => {});
    dir.remove();
  });

  for (const backend of BACKENDS)
    test(`${backend}, after the first sync: kpng verify exits 0, the backend named clean`, async () => {
      const r = await kpng(["verify", "--server", nodes[backend].sock]);
      expect([r.code, r.err]).toEqual([0, ""]);
      expect(rows(r.out)).toEqual([[backend, "-", "-", "clean"]]);
    });

  test("iptables: the Service's cluster-IP rule deleted by hand: verify names the Service and frontend, exit 1; another Service is clean", async () => {
    const { exec, sock } = nodes.iptables;
    const rules = (await exec(["iptables-save", "-t", "nat"])).split("\n").filter((l) => l.startsWith("-A KPNG-SERVICES "));
    const n = rules.findIndex((l) => l.includes(`-d ${WEB}/32 `) && l.includes("--dport 80 "));
    expect(n).toBeGreaterThanOrEqual(0);
    await exec(["iptables", "-t", "nat", "-D", "KPNG-SERVICES", String(n + 1)]);

    const all = await kpng(["verify", "--server", sock]);
    expect(all.code).toBe(1);
    expect(all.out.split("\n")[0].split(/\s+/)).toEqual(["BACKEND", "SERVICE", "FRONTEND", "DRIFT", "DETAIL"]);
    expect(rows(all.out)).toEqual([["iptables", `${NS}/web`, `${WEB}:80/TCP`, "missing"]]);
    expect(all.err).toContain("the kernel differs from what kpng programmed: 1 difference");

    const web = await kpng(["verify", `${NS}/web`, "--server", sock]);
    expect([web.code, rows(web.out)]).toEqual([1, [["iptables", `${NS}/web`, `${WEB}:80/TCP`, "missing"]]]);
    const other = await kpng(["verify", `${NS}/other`, "--server", sock]);
    expect([other.code, other.err, rows(other.out)]).toEqual([0, "", [["iptables", "-", "-", "clean"]]]);
  });

  test("nft: the Service's element deleted by hand: repaired at once, the WARN line names the Service and frontend, verify then exits 0", async () => {
    const { exec, sock, proc } = nodes.nft;
    await exec(["nft", "delete", "element", "ip", "kpng", "service-ips", `{ ${WEB} . tcp . 80 }`]);

    // the check before the repair: the loss named by Service and frontend, on one line
    const warn = await proc.waitFor(/ WARN kpng: rules lost /, 60_000);
    expect(warn).toContain("backend=nft");
    expect(warn).toContain("differences=1");
    expect(warn).toContain(`${NS}/web ${WEB}:80/TCP:`);
    expect(warn).not.toContain(`${NS}/other`);

    // repaired: the element is back and verify finds nothing (bounded: the repair sync is paced on a loaded machine)
    const after = await until(
      () => kpng(["verify", "--server", sock]),
      (r) => r.code === 0,
    );
    expect([after.code, after.err, rows(after.out)]).toEqual([0, "", [["nft", "-", "-", "clean"]]]);
    expect(await exec(["nft", "list", "map", "ip", "kpng", "service-ips"])).toContain(`${WEB} . tcp . 80`);
    const other = await kpng(["verify", `${NS}/other`, "--server", sock]);
    expect([other.code, rows(other.out)]).toEqual([0, [["nft", "-", "-", "clean"]]]);

    // the loss was counted (the drift gauge is 0 again: the verify above was a whole check)
    const metrics = await exec(["curl", "-sf", "http://127.0.0.1:10249/metrics"]);
    expect(metrics).toMatch(/kpng_backend_rules_lost_total\{backend="nft"\} [1-9]/);
  });
});
