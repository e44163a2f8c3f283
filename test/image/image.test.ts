// kpng's image (issue 19, goal 5), built here by deploy/image/build.sh with
// Debian's tools, then run as the DaemonSet runs it: runc, host network (a
// node namespace this test made), privileged, kpng's ConfigMap of
// deploy/ mounted with the API server's real address and the pod's
// service-account token, the args and memory limit of deploy/daemonset.yaml.
// The API server is the real kube-apiserver (test/harness/kube-apiserver.ts),
// the token one it minted for the DaemonSet's ServiceAccount with the
// rights of deploy/rbac.yaml. A client outside
// the node checks every behaviour of test/deployed/cluster.ts with real
// packets. Then the iptables wrapper: on a host whose rules are in
// iptables-legacy, kpng's land there; on an nft host, in nft.
//
// The image is built once per run, at load (Debian's packages are cached
// between runs, see build.sh; the time it took is printed). Where Debian's
// archive cannot be reached and nothing is cached, the suite is skipped with
// a loud message.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { LOADED_WAIT_MS, ROOT, tempDir } from "../harness/kpng-process.ts";
import { compiledKpng } from "../fixtures/compiled.ts";
import { createTopology, run, type Topology } from "../harness/netns.ts";
import { haveK8s, type K8sObject, type KubeApiServer, sharedApiServer } from "../harness/kube-apiserver.ts";
import { checks, clusterObjects, deniedClient, NODE, podPorts, runChecks, wanted } from "../deployed/cluster.ts";
import { v4 } from "../fixtures/addresses.ts";
import { slice, svc } from "../fixtures/k8s.ts";
import { freshRoot, runPod, unpackImage, type Container, type RuntimeConfig } from "./container.ts";

const VERSION = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
/** build.sh's exit code when Debian's archive cannot be reached and nothing is cached */
const UNREACHABLE = 75;
const tmp = tempDir("kpng-image-");

type Doc = Record<string, any>;
const manifests = (file: string): Doc[] => parseAllDocuments(readFileSync(join(ROOT, "deploy", file), "utf8")).map((d) => d.toJS() as Doc);
const daemonSet = manifests("daemonset.yaml").find((d) => d.kind === "DaemonSet")!;
const kpngConfigMap = manifests("kpng-configmap.yaml").find((d) => d.kind === "ConfigMap")!;

async function buildImage(): Promise<{ layout: string; report: string } | { unreachable: string }> {
  tmp.create();
  const bin = await compiledKpng();
  const layout = join(tmp.path, "image");
  const p = Bun.spawn(["bash", "deploy/image/build.sh", "--kpng", bin, "--out", layout], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code === UNREACHABLE) return { unreachable: err.trim().split("\n").at(-1)! };
  if (code !== 0) throw new Error(`deploy/image/build.sh failed (${code}):\n${err}`);
  return { layout, report: out.trim() };
}

const started = Date.now();
const built = await buildImage();
const skip = "unreachable" in built;
if (skip)
  console.warn(`\n${"!".repeat(72)}\n!!! test/image SKIPPED: the image cannot be built here: ${built.unreachable}\n${"!".repeat(72)}\n`);
else console.log(`test/image: ${built.report.replace("\n", "; ")} (built in ${((Date.now() - started) / 1000).toFixed(0)} s)`);
const layout = skip ? "" : built.layout;
const bundle = join(tmp.path, "bundle");
let base: RuntimeConfig;

beforeAll(async () => {
  if (!skip) base = await unpackImage(layout, `${VERSION}-amd64`, bundle);
}, 120_000);
afterAll(() => tmp.remove());

const blob = (digest: string) => JSON.parse(readFileSync(join(layout, "blobs/sha256", digest.replace("sha256:", "")), "utf8")) as Doc;

describe.skipIf(skip)("the image", () => {
  test("tagged with package.json's version: an image index of linux/amd64 and linux/arm64", () => {
    const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as Doc;
    const tags = index.manifests.map((m: Doc) => m.annotations["org.opencontainers.image.ref.name"]);
    expect(tags.sort()).toEqual([VERSION, `${VERSION}-amd64`, `${VERSION}-arm64`]);
    const top = index.manifests.find((m: Doc) => m.annotations["org.opencontainers.image.ref.name"] === VERSION);
    expect(top.mediaType).toBe("application/vnd.oci.image.index.v1+json");
    const platforms = (blob(top.digest).manifests as Doc[]).map((m) => `${m.platform.os}/${m.platform.architecture}`);
    expect(platforms).toEqual(["linux/amd64", "linux/arm64"]);
  });

  test.each(["amd64", "arm64"])(
    "%s: kpng is the entrypoint; the tools and kpng in two layers; the config names the architecture",
    (arch) => {
      const index = JSON.parse(readFileSync(join(layout, "index.json"), "utf8")) as Doc;
      const m = index.manifests.find((x: Doc) => x.annotations["org.opencontainers.image.ref.name"] === `${VERSION}-${arch}`);
      const manifest = blob(m.digest);
      expect(manifest.layers.length).toBe(2);
      const config = blob(manifest.config.digest);
      expect([config.os, config.architecture]).toEqual(["linux", arch]);
      expect(config.config.Entrypoint).toEqual(["/usr/local/bin/kpng"]);
      expect(config.config.Labels["org.opencontainers.image.version"]).toBe(VERSION);
    },
  );

  test("the arm64 image holds an aarch64 kpng and aarch64 tools", async () => {
    const arm = join(tmp.path, "bundle-arm64");
    await unpackImage(layout, `${VERSION}-arm64`, arm);
    const machine = (f: string) => readFileSync(join(arm, "rootfs", f)).readUInt16LE(18);
    // ELF e_machine: 0xb7 aarch64
    for (const f of [
      "usr/local/bin/kpng",
      "usr/sbin/nft",
      "usr/sbin/xtables-nft-multi",
      "usr/sbin/ip",
      "usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1",
    ])
      expect([f, machine(f)]).toEqual([f, 0xb7]);
  });

  test("only what kpng runs: the backends' tools, their libraries, no package manager, shell tools or docs", async () => {
    const root = join(bundle, "rootfs");
    for (const tool of [
      "nft",
      "iptables",
      "iptables-restore",
      "ip6tables-save",
      "iptables-legacy-restore",
      "iptables-nft-restore",
      "ipset",
      "ipvsadm",
      "conntrack",
      "ip",
      "sysctl",
      "mount",
    ]) {
      expect(existsSync(join(root, "usr/sbin", tool))).toBe(true);
    }
    for (const absent of ["usr/bin/dpkg", "usr/bin/apt-get", "usr/bin/perl", "usr/bin/ls", "usr/share/doc", "var/lib/dpkg"])
      expect(existsSync(join(root, absent))).toBe(false);
    // Everything but kpng's own binary: Debian's tools and libraries (deploy/README.md has the size).
    const all = Number((await run(["du", "-sb", root])).split("\t")[0]);
    const tools = all - statSync(join(root, "usr/local/bin/kpng")).size;
    expect(tools).toBeLessThan(16e6);
  });
});

// -- the iptables wrapper, in the image's root, on "hosts" (namespaces) of each kind

interface WrapperCase {
  name: string;
  /** rules put on the host first, as `iptables-*` commands of the machine */
  host: string[][];
  want: "legacy" | "nft";
}
const chain = (flavour: string, table: string, name: string) => [`iptables-${flavour}`, "-t", table, "-N", name];
const rule = (flavour: string, table: string, name: string) => [`iptables-${flavour}`, "-t", table, "-A", name, "-j", "RETURN"];
const wrapperCases: WrapperCase[] = [
  { name: "a host without rules: nft (upstream's default)", host: [], want: "nft" },
  { name: "kubelet's hint chain in iptables-nft: nft", host: [chain("nft", "mangle", "KUBE-IPTABLES-HINT")], want: "nft" },
  { name: "kubelet's hint chain in iptables-legacy: legacy", host: [chain("legacy", "mangle", "KUBE-IPTABLES-HINT")], want: "legacy" },
  {
    name: "kubelet's older canary chain in iptables-legacy: legacy",
    host: [chain("legacy", "mangle", "KUBE-KUBELET-CANARY")],
    want: "legacy",
  },
  {
    name: "no hint, kube-proxy's rules in iptables-legacy: legacy",
    host: [chain("legacy", "nat", "KUBE-SERVICES"), rule("legacy", "nat", "KUBE-SERVICES"), rule("legacy", "nat", "KUBE-SERVICES")],
    want: "legacy",
  },
  {
    name: "no hint, more rules in nft than in legacy: nft",
    host: [
      chain("legacy", "nat", "KPNG-SERVICES"),
      rule("legacy", "nat", "KPNG-SERVICES"),
      chain("nft", "nat", "KUBE-SERVICES"),
      rule("nft", "nat", "KUBE-SERVICES"),
      rule("nft", "nat", "KUBE-SERVICES"),
    ],
    want: "nft",
  },
  {
    name: "the hint beats the counts: hint in nft, more rules in legacy: nft",
    host: [
      chain("nft", "mangle", "KUBE-IPTABLES-HINT"),
      chain("legacy", "nat", "KUBE-SERVICES"),
      rule("legacy", "nat", "KUBE-SERVICES"),
      rule("legacy", "nat", "KUBE-SERVICES"),
    ],
    want: "nft",
  },
];

describe.skipIf(skip)("iptables wrapper: iptables, iptables-save, iptables-restore follow the host's flavour", () => {
  for (const c of wrapperCases) {
    test(c.name, async () => {
      const ns = `kpiw${Math.random().toString(36).slice(2, 8)}`;
      const root = await freshRoot(join(bundle, "rootfs"));
      await run(["ip", "netns", "add", ns]);
      try {
        for (const argv of c.host) await run(["ip", "netns", "exec", ns, ...argv]);
        // inside the image's root, with /proc (iptables-legacy reads its tables' names there)
        const inImage = (argv: string[], stdin?: string) =>
          run(
            ["ip", "netns", "exec", ns, "sh", "-c", `mount -t proc proc ${root.path}/proc && exec chroot ${root.path} "$@"`, "sh", ...argv],
            stdin,
          );
        await inImage(["iptables-restore", "--noflush"], "*filter\n:KPNG-PROBE - [0:0]\n-A KPNG-PROBE -j RETURN\nCOMMIT\n");
        await inImage(["ip6tables", "-t", "filter", "-N", "KPNG-PROBE6"]);
        const where = async (flavour: string, save: string) =>
          (await run(["ip", "netns", "exec", ns, `${save}-${flavour}-save`, "-t", "filter"])).includes(":KPNG-PROBE");
        const got = {
          legacy: [await where("legacy", "iptables"), await where("legacy", "ip6tables")],
          nft: [await where("nft", "iptables"), await where("nft", "ip6tables")],
        };
        const other = c.want === "nft" ? "legacy" : "nft";
        expect({ [c.want]: got[c.want], [other]: got[other] }).toEqual({ [c.want]: [true, true], [other]: [false, false] });
        // and iptables-save shows what was written
        expect(await inImage(["iptables-save", "-t", "filter"])).toContain("-A KPNG-PROBE -j RETURN");
      } finally {
        await run(["ip", "netns", "del", ns]).catch(() => {});
        await root.remove();
      }
    }, 90_000);
  }
});

// -- the DaemonSet's pod under runc

const API_PORT = 6443;
const real = haveK8s("the image's pod against the real kube-apiserver");

/**
 * A token of the DaemonSet's ServiceAccount, its rights those of
 * deploy/rbac.yaml, applied as it ships.
 */
async function serviceAccountToken(api: KubeApiServer): Promise<string> {
  await api.apply(...manifests("rbac.yaml").map((d) => d as K8sObject));
  return (await api.kubectl(["create", "token", daemonSet.spec.template.spec.serviceAccountName, "-n", "kube-system"])).trim();
}

/** a Kubernetes quantity in Mi, in bytes */
const mebibytes = (q: string) => Number(/^(\d+)Mi$/.exec(q)![1]) * 2 ** 20;

/** the memory limit of a process's cgroup (v1 memory controller, or v2) */
function memoryLimitOf(pid: number): number {
  const cgroups = readFileSync(`/proc/${pid}/cgroup`, "utf8");
  const v1 = /^\d+:memory:(.*)$/m.exec(cgroups)?.[1];
  const file =
    v1 !== undefined ? `/sys/fs/cgroup/memory${v1}/memory.limit_in_bytes` : `/sys/fs/cgroup${/^0::(.*)$/m.exec(cgroups)![1]}/memory.max`;
  return Number(readFileSync(file, "utf8").trim());
}

interface Pod {
  topo: Topology;
  api: KubeApiServer;
  container: Container;
  destroy(): Promise<void>;
}

/**
 * A node namespace with the cluster of test/deployed/cluster.ts in the real
 * kube-apiserver (reachable from the node as https://127.0.0.1:6443, the
 * control plane's address written in the ConfigMap's kubeconfig), and the
 * DaemonSet's pod started on it. `hostRules` run in the node first;
 * `mode` replaces the ConfigMap's; `configConf` replaces its config.conf.
 */
interface PodOptions {
  mode?: string;
  hostRules?: string[][];
  configConf?: string;
}

async function startPod(opts: PodOptions = {}): Promise<Pod> {
  const topo = await createTopology({ pods: 3, prefix: "kpim" });
  const dir = join(tmp.path, topo.id);
  mkdirSync(dir);
  const cleanups: Array<() => unknown> = [() => topo.destroy()];
  const destroy = async () => {
    for (const c of cleanups.reverse()) await c();
  };
  try {
    for (const argv of opts.hostRules ?? []) await topo.exec(topo.node.ns, argv);
    for (const p of topo.pods) await topo.serve(p, podPorts);
    await topo.exec(topo.client.ns, ["ip", "addr", "add", `${deniedClient}/24`, "dev", "eth0"]);
    const api = await sharedApiServer();
    await api.apply(...clusterObjects(topo));
    cleanups.push(await api.reach(topo.node.ns, API_PORT));
    const token = await serviceAccountToken(api);

    // the volumes: the ConfigMap, the service account, the host's lock and socket directory
    const volume = (name: string, files: Record<string, string>) => {
      mkdirSync(join(dir, name));
      for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, name, f), text);
      return join(dir, name);
    };
    const data = kpngConfigMap.data as Record<string, string>;
    const configMap = volume("config", {
      "kubeconfig.conf": data["kubeconfig.conf"].replace(/server: \S+/, `server: https://127.0.0.1:${API_PORT}`),
      "config.conf": (opts.configConf ?? data["config.conf"]).replace(/^mode: .*$/m, (m) => (opts.mode ? `mode: ${opts.mode}` : m)),
    });
    const serviceAccount = volume("serviceaccount", { token, "ca.crt": api.ca, namespace: "kube-system" });
    const lock = join(dir, "xtables.lock");
    writeFileSync(lock, "");
    const socketDir = volume("kpng-socket", {});

    const c = daemonSet.spec.template.spec.containers[0];
    const mountPath = (name: string) => c.volumeMounts.find((m: Doc) => m.name === name).mountPath as string;
    const container = await runPod(bundle, base, {
      netns: topo.node.ns,
      args: (c.args as string[]).map((a) => a.replace("$(NODE_NAME)", NODE)),
      env: { NODE_NAME: NODE },
      memoryLimit: mebibytes(c.resources.limits.memory),
      mounts: [
        { source: configMap, destination: mountPath("config"), readonly: true },
        { source: serviceAccount, destination: "/var/run/secrets/kubernetes.io/serviceaccount", readonly: true },
        { source: lock, destination: mountPath("xtables-lock") },
        { source: socketDir, destination: mountPath("kpng-socket") },
      ],
    });
    cleanups.push(() => container.remove());
    await container.proc.waitFor(/ INFO kpng: synced /, 60_000);
    return { topo, api, container, destroy };
  } catch (err) {
    await destroy();
    throw err;
  }
}

interface PodCase {
  name: string;
  opts: PodOptions;
  /** more tests on the running pod */
  more?: (pod: () => Pod) => void;
}

/** the host's flavour, for the wrapper to follow: kubelet's hint chain in it */
const iptablesHost = (flavour: "legacy" | "nft"): PodCase => {
  const other = flavour === "nft" ? "legacy" : "nft";
  return {
    name: `iptables mode on a host whose kubelet uses iptables-${flavour}`,
    opts: { mode: "iptables", hostRules: [chain(flavour, "mangle", "KUBE-IPTABLES-HINT")] },
    more: (pod) =>
      test(`kpng's chains are in iptables-${flavour}, none in iptables-${other}`, async () => {
        const save = (f: string) => pod().topo.exec(pod().topo.node.ns, [`iptables-${f}-save`, "-t", "nat"]);
        expect(await save(flavour)).toContain(":KPNG-SERVICES");
        expect(await save(other)).not.toContain("KPNG-");
      }),
  };
};

const podCases: PodCase[] = [
  {
    name: "the shipped kpng ConfigMap (nftables)",
    opts: {},
    more: (pod) => {
      test("the rules are the node's: kpng's nftables tables in the host network namespace", async () => {
        expect(await pod().topo.exec(pod().topo.node.ns, ["nft", "list", "tables"])).toContain("table ip kpng");
      });
      test("it follows the API server at the kubeconfig's address, with the pod's service-account token", async () => {
        // a Service created now (the token is the pod's only credential; anonymous requests may list nothing)
        const p = pod();
        const ip = v4.clusterIP(77);
        await p.api.apply(
          svc({ name: "late", clusterIPs: [ip], ports: [{ name: "tcp", protocol: "TCP", port: 80, targetPort: 8080 }] }),
          slice({
            service: "late",
            ports: [{ name: "tcp", protocol: "TCP", port: 8080 }],
            endpoints: [{ ip: p.topo.pods[0].v4, node: NODE, pod: "pod0" }],
          }),
        );
        let r = await p.topo.probe(p.topo.client.ns, { ip, port: 80, proto: "tcp", timeout: 1 });
        for (const end = Date.now() + LOADED_WAIT_MS; !r.ok && Date.now() < end; await Bun.sleep(200))
          r = await p.topo.probe(p.topo.client.ns, { ip, port: 80, proto: "tcp", timeout: 1 });
        expect(r).toMatchObject({ ok: true, who: "pod0" });
      }, 90_000);
      test("the liveness probe: GET 127.0.0.1:10256/livez in the host network answers 200", async () => {
        const probe = await pod().topo.probe(pod().topo.node.ns, { ip: "127.0.0.1", port: 10256, proto: "http", path: "/livez" });
        expect(probe).toMatchObject({ ok: true, who: "200" });
      });
      test("it runs in a cgroup limited to the DaemonSet's memory limit", async () => {
        const { pid } = JSON.parse(await run(["runc", "state", pod().container.id])) as { pid: number };
        expect(memoryLimitOf(pid)).toBe(mebibytes(daemonSet.spec.template.spec.containers[0].resources.limits.memory));
      });
      test("the brain's API socket is on the host, in the socket directory's volume", async () => {
        expect((await run(["ls", join(tmp.path, pod().topo.id, "kpng-socket")])).trim()).toBe("kpng.sock");
      });
    },
  },
  // kubeadm's own, every field as kubeadm writes it (mode "" included): read as it is
  {
    name: "kubeadm's kube-proxy ConfigMap as kubeadm writes it",
    opts: { configConf: readFileSync(join(ROOT, "test/config/golden/kubeadm.v1alpha1.yaml"), "utf8") },
  },
  iptablesHost("legacy"),
  iptablesHost("nft"),
];

for (const c of podCases) {
  describe.skipIf(skip || !real)(`the DaemonSet's pod under runc (host network, privileged): ${c.name}`, () => {
    let pod: Pod;
    beforeAll(async () => {
      pod = await startPod(c.opts);
      // the API server, the namespaces, the container, its first sync: two loaded waits
    }, 150_000);
    afterAll(() => pod?.destroy());

    test("every service behaves for a client outside the node", async () => {
      const list = checks(pod.topo);
      expect(await runChecks(pod.topo, list)).toEqual(wanted(list));
    }, 90_000);
    c.more?.(() => pod);
  });
}
