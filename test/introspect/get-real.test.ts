// `kpng get services NS/NAME` against the running kpng (issue 36, done-when):
// the whole process with an operator's flags (--kubeconfig, --node-name,
// --backend nft, --listen on a unix socket), following the real
// kube-apiserver 1.36.2; the EndpointSlice is edited with the real kubectl.
// One endpoint goes from ready to terminating to gone while another stays
// ready; `kpng get` asked from outside the node's namespace through the
// socket shows each step and why the terminating one is left out.

import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { join } from "node:path";
import { v4 } from "../fixtures/addresses.ts";
import { node, slice, svc, type EpOpts } from "../fixtures/k8s.ts";
import { kpngCommand, LOADED_WAIT_MS, ROOT, startKpng, tempDir, type KpngProcess } from "../harness/kpng-process.ts";
import { haveK8s, sharedApiServer, type KubeApiServer } from "../harness/kube-apiserver.ts";
import { run } from "../harness/netns.ts";

// a test waits on its conditions up to LOADED_WAIT_MS each: 30 s + 60 s a wait, two by default
setDefaultTimeout(150_000);
const NODE = "node-get";
const NS = "kpng-get";
const IP = v4.clusterIP(236);
const A = v4.pod(1, 236);
const B = v4.pod(2, 236);

const service = svc({ ns: NS, name: "web", clusterIPs: [IP], ports: [{ name: "http", protocol: "TCP", port: 80, targetPort: 8080 }] });
const endpoints = (eps: EpOpts[]) => slice({ ns: NS, service: "web", endpoints: eps });

/** `kpng get ...` as an operator runs it on the node: its exit code and output */
async function kpng(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = Bun.spawn([...kpngCommand(), ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  return { code, out, err };
}

const real = haveK8s("kpng get against the real kube-apiserver");

describe.skipIf(!real)("kpng get services: an endpoint from ready to terminating to gone (real kube-apiserver)", () => {
  let api: KubeApiServer;
  let proc: KpngProcess;
  const netns = `kpget${Math.random().toString(36).slice(2, 7)}`;
  const dir = tempDir("kpng-get-");
  const stops: Array<() => Promise<unknown>> = [];
  let sock = "";

  /** `kpng get` until `ok(stdout)` (bounded: LOADED_WAIT_MS, the machine is shared); the last run */
  const getUntil = async (args: string[], ok: (out: string) => boolean) => {
    const end = performance.now() + LOADED_WAIT_MS;
    for (;;) {
      const r = await kpng(["get", ...args, "--server", sock]);
      if ((r.code === 0 && ok(r.out)) || performance.now() > end) return r;
      await Bun.sleep(200);
    }
  };

  beforeAll(async () => {
    dir.create();
    sock = `unix://${join(dir.path, "kpng.sock")}`;
    api = await sharedApiServer();
    await run(["ip", "netns", "add", netns]);
    await run(["ip", "-n", netns, "link", "set", "lo", "up"]);
    stops.push(await api.reach(netns));
    await api.apply(
      node(NODE, { ips: [v4.node(1)] }),
      service,
      endpoints([
        { ip: A, node: NODE, pod: "a" },
        { ip: B, node: "node-other", pod: "b" },
      ]),
    );
    const kubeconfig = api.writeKubeconfig(join(dir.path, "kubeconfig"), { server: "https://127.0.0.1:6443" });
    proc = startKpng(["--kubeconfig", kubeconfig, "--node-name", NODE, "--backend", "nft", "--listen", sock], {
      wrap: ["ip", "netns", "exec", netns],
    });
    await proc.waitFor(/ INFO kpng: synced /);
  }, 150_000);

  afterAll(async () => {
    await proc?.stop("SIGKILL");
    for (const s of stops) await s();
    await api?.kubectl(["delete", "namespace", NS, "--wait=false", "--ignore-not-found"]).catch(() => {});
    await run(["ip", "netns", "del", netns]).catch(() => {});
    dir.remove();
  });

  test("both endpoints ready: both serve the cluster IP, none is left out", async () => {
    const r = await getUntil(["services", `${NS}/web`], (out) => out.includes(`${A}:8080`) && out.includes(`${B}:8080`));
    expect(r.err).toBe("");
    const [head, row, ...rest] = r.out.trimEnd().split("\n");
    expect(rest).toEqual([]);
    expect(head.split(/\s+/)).toEqual([
      "NAMESPACE",
      "NAME",
      "TYPE",
      "PORT",
      "FRONTENDS",
      "INTERNAL-ENDPOINTS",
      "EXTERNAL-ENDPOINTS",
      "LEFT-OUT",
    ]);
    expect(row.split(/\s+/)).toEqual([NS, "web", "ClusterIP", "http:80/TCP", `${IP}:80`, `${A}:8080,${B}:8080`, "-", "<none>"]);
  });

  test("one endpoint terminating (kubectl apply of its conditions): left out, and why", async () => {
    await api.apply(
      endpoints([
        { ip: A, node: NODE, pod: "a", ready: false, serving: true, terminating: true },
        { ip: B, node: "node-other", pod: "b" },
      ]),
    );
    const r = await getUntil(["services", `${NS}/web`], (out) => out.includes(`${A}(Terminating)`));
    const row = r.out.trimEnd().split("\n")[1]?.split(/\s+/);
    expect(row?.slice(5)).toEqual([`${B}:8080`, "-", `${A}(Terminating)`]);
    // the endpoints view and the JSON give the conditions and the reason in full
    const eps = await kpng(["get", "endpoints", `${NS}/web`, "--server", sock]);
    const line = eps.out
      .split("\n")
      .find((l) => l.includes(A))
      ?.split(/\s+/);
    expect(line).toEqual([NS, "web", A, NODE, "false", "true", "true", "Terminating", "-"]);
    const json = JSON.parse((await kpng(["get", "services", `${NS}/web`, "-o", "json", "--server", sock])).out);
    const a = json.services[0].endpoints.find((e: { ip: string }) => e.ip === A);
    expect(a.internal).toEqual({ used: false, reason: "Terminating", message: expect.stringContaining("ready endpoints exist") });
    expect(json.backends.map((b: { name: string; revision: string }) => [b.name, Number(b.revision) > 0])).toEqual([["nft", true]]);
  });

  test("the other one terminating too: the serving terminating endpoints are the fallback, marked so", async () => {
    await api.apply(
      endpoints([
        { ip: A, node: NODE, pod: "a", ready: false, serving: true, terminating: true },
        { ip: B, node: "node-other", pod: "b", ready: false, serving: true, terminating: true },
      ]),
    );
    const r = await getUntil(["services", `${NS}/web`], (out) => out.includes(`${B}:8080(terminating)`));
    expect(r.out.trimEnd().split("\n")[1]?.split(/\s+/).slice(5)).toEqual([`${A}:8080(terminating),${B}:8080(terminating)`, "-", "<none>"]);
  });

  test("the endpoint gone from the slice: gone from kpng get", async () => {
    await api.apply(endpoints([{ ip: B, node: "node-other", pod: "b" }]));
    const r = await getUntil(["services", `${NS}/web`], (out) => !out.includes(A));
    expect(r.out).not.toContain(A);
    expect(r.out.trimEnd().split("\n")[1]?.split(/\s+/).slice(5)).toEqual([`${B}:8080`, "-", "<none>"]);
  });

  test("a Service this node does not proxy: one line naming it, exit 1", async () => {
    const r = await kpng(["get", "services", `${NS}/nothing`, "--server", sock]);
    expect(r.code).toBe(1);
    expect(r.err).toContain(`"${NS}/nothing" is not proxied on node ${NODE}`);
  });

  test("no kpng on the socket: the error names the flag that serves it", async () => {
    const r = await kpng(["get", "services", "--server", `unix://${join(dir.path, "none.sock")}`]);
    expect(r.code).toBe(1);
    expect(r.err).toContain("--listen=unix://");
  });
});
