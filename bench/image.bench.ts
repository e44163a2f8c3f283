// `bun run bench image`: kpng's image as the DaemonSet runs it, for the
// figures behind deploy/daemonset.yaml's requests and limits. The image is
// built (deploy/image/build.sh), unpacked, and run under runc in a node
// namespace (test/image/container.ts: host network = that namespace,
// privileged, the shipped kpng ConfigMap in nftables mode) against the
// in-repo API server of `bench startup` (1,000 and 10,000 services x 10
// endpoints, 100 nodes). Per size, after the first sync and 20 EndpointSlice
// changes:
//
//   - the container's memory cgroup (what a limit applies to): peak and now,
//     with its anonymous part (rss) and page cache;
//   - kpng's own VmHWM (peak RSS) and RssFile (pages of its executable);
//   - the image's size, as build.sh prints it.
//
// Figures only; nothing asserted. KPNG_BENCH_SIZES (default "1000,10000").

import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseAllDocuments } from "yaml";
import { buildBinary } from "../build.ts";
import { createTopology } from "../test/harness/netns.ts";
import { runPod, unpackImage } from "../test/image/container.ts";
import { deleteNftTables } from "./kpng-under-test.ts";
import { NODE_NAME } from "./startup-api-server.ts";

const ROOT = join(import.meta.dir, "..");
const BUN = process.execPath;
const CHANGES = 20;
const MB = 1024 * 1024;

const mb = (bytes: number) => (bytes / MB).toFixed(0);
const cgroupFile = (cg: string, f: string) => readFileSync(join("/sys/fs/cgroup/memory", cg, f), "utf8");
const cgroupStat = (cg: string, key: string) => Number(new RegExp(`^${key} (\\d+)$`, "m").exec(cgroupFile(cg, "memory.stat"))?.[1] ?? NaN);
const status = (pid: number, key: string) =>
  Number(new RegExp(`${key}:\\s+(\\d+)`).exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1] ?? NaN) * 1024;

/** Lines of a stream, with a wait for the n-th matching one. */
function lines(stream: ReadableStream<Uint8Array>) {
  const all: string[] = [];
  void (async () => {
    let rest = "";
    for await (const chunk of stream) {
      const parts = (rest + new TextDecoder().decode(chunk)).split("\n");
      rest = parts.pop()!;
      all.push(...parts);
    }
  })();
  return async (re: RegExp, n = 1, timeoutMs = 180_000) => {
    const end = Date.now() + timeoutMs;
    for (;;) {
      const hits = all.filter((l) => re.test(l));
      if (hits.length >= n) return hits[n - 1];
      if (Date.now() > end) throw new Error(`timed out waiting for ${re}: ${all.slice(-5).join("\n")}`);
      await Bun.sleep(100);
    }
  };
}

export default async function imageBench() {
  const sizes = (process.env.KPNG_BENCH_SIZES ?? "1000,10000").split(",").map(Number);
  const dir = join(tmpdir(), `kpng-bench-image-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  const topo = await createTopology({ pods: 1, prefix: "kpb" });
  try {
    const bin = join(dir, "kpng");
    await buildBinary(bin);
    const build = Bun.spawnSync(["bash", "deploy/image/build.sh", "--kpng", bin, "--out", join(dir, "image")], {
      cwd: ROOT,
      stderr: "pipe",
    });
    if (build.exitCode !== 0) throw new Error(`deploy/image/build.sh: ${build.stderr.toString()}`);
    console.log(build.stdout.toString().trim());
    const version = (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string }).version;
    const bundle = join(dir, "bundle");
    const base = await unpackImage(join(dir, "image"), version, bundle);
    const configMap = parseAllDocuments(readFileSync(join(ROOT, "deploy/kpng-configmap.yaml"), "utf8"))
      .map((d) => d.toJS() as { kind: string; data: Record<string, string> })
      .find((d) => d.kind === "ConfigMap")!;
    await topo.serve(topo.pods[0], { tcp: [8080] });
    console.log(
      `\nthe DaemonSet's pod under runc, nftables, N services x 10 endpoints on 100 nodes, after the first sync and ${CHANGES} changes`,
    );
    console.log("  services | cgroup peak MB | cgroup now MB (rss + cache) | kpng VmHWM MB | kpng RssFile MB");
    for (const services of sizes) {
      const api = Bun.spawn(
        ["ip", "netns", "exec", topo.node.ns, BUN, join(import.meta.dir, "startup-api-server.ts"), String(services), topo.pods[0].v6, dir],
        {
          stdin: "pipe",
          stdout: "pipe",
          stderr: "inherit",
        },
      );
      const apiOut = lines(api.stdout);
      const cgroup = `kpng-bench-${process.pid}-${services}`;
      let pod: Awaited<ReturnType<typeof runPod>> | undefined;
      try {
        const kubeconfig = (await apiOut(/^ready /)).split(" ")[1];
        const volume = join(dir, `kube-proxy-${services}`);
        mkdirSync(volume, { recursive: true });
        writeFileSync(join(volume, "config.conf"), configMap.data["config.conf"]);
        writeFileSync(join(volume, "kubeconfig.conf"), readFileSync(kubeconfig, "utf8"));
        deleteNftTables(topo.node.ns, "kpng");
        pod = await runPod(bundle, base, {
          netns: topo.node.ns,
          args: ["--config=/var/lib/kube-proxy/config.conf", `--hostname-override=${NODE_NAME}`],
          mounts: [{ source: volume, destination: "/var/lib/kube-proxy", readonly: true }],
          cgroup: `/${cgroup}`,
        });
        await pod.proc.waitFor(/ INFO kpng: synced /, 180_000);
        for (let n = 1; n <= CHANGES; n++) {
          api.stdin.write(`change ${n}\n`);
          await api.stdin.flush();
          await apiOut(/^changed /, n);
          const end = Date.now() + 60_000;
          while (pod.proc.stderr.filter((l) => / INFO kpng: synced /.test(l)).length <= n && Date.now() < end) await Bun.sleep(50);
        }
        await Bun.sleep(500);
        const pid = Number(cgroupFile(cgroup, "cgroup.procs").trim().split("\n")[0]);
        const peak = Number(cgroupFile(cgroup, "memory.max_usage_in_bytes"));
        const now = Number(cgroupFile(cgroup, "memory.usage_in_bytes"));
        console.log(
          `  ${String(services).padStart(8)} | ${mb(peak).padStart(14)} | ${mb(now).padStart(6)} (${mb(cgroupStat(cgroup, "total_rss"))} + ${mb(cgroupStat(cgroup, "total_cache"))})`.padEnd(
            60,
          ) + ` | ${mb(status(pid, "VmHWM")).padStart(13)} | ${mb(status(pid, "RssFile")).padStart(15)}`,
        );
      } finally {
        await pod?.remove();
        api.kill();
        await api.exited;
      }
    }
  } finally {
    await topo.destroy();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (import.meta.main) await imageBench();
