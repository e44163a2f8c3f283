// Where real-kernel eBPF tests attach: a cgroup v2 directory and a bpf file
// system of their own, never the root cgroup (a hook there would steer every
// process on the machine). Both are mounted under a temporary directory,
// outside /sys, so they stay visible inside `ip netns exec` (which remounts
// /sys). Client processes move themselves into the cgroup before they exec
// anything: `inCgroup(argv)`.
//
//   const sb = await createSandbox();       // afterAll(() => sb.destroy())
//   sb.pinDir, sb.cgroup                     // for Config.ebpf
//   await sb.probeMany(topo, topo.node.ns, probes)   // probe.py from inside the cgroup

import { mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { detach } from "../../plugins/ebpf/attach.ts";
import { pythonPath, run, startProbeLoop, type Probe, type ProbeResult, type ProbeRun } from "../harness/netns.ts";

export interface Sandbox {
  readonly dir: string;
  readonly pinDir: string;
  readonly cgroup: string;
  /** argv that first joins the test cgroup, then execs `argv` */
  inCgroup(argv: string[]): string[];
  /** probe.py run from `ns`, inside the test cgroup */
  probeMany(ns: string, probes: Probe[]): Promise<ProbeResult[]>;
  /** probe_loop.py from `ns` inside the test cgroup, running until stop(); resolves after its first round */
  probeLoop(ns: string, probes: Probe[], pauseMs?: number): Promise<{ stop(): Promise<ProbeRun> }>;
  /** a python snippet run from `ns` inside the test cgroup; its stdout */
  python(ns: string, code: string, stdin?: string): Promise<string>;
  destroy(): Promise<void>;
}

const harness = join(import.meta.dir, "../harness");
const live = new Set<Sandbox>();
process.on("exit", () => {
  for (const s of live) cleanupSync(s);
});

function cleanupSync(s: Sandbox) {
  try {
    detach(s.pinDir);
  } catch {}
  // processes left in the cgroup (a killed test) go back to the cgroup's parent first
  try {
    const parent = join(s.cgroup, "..");
    for (const pid of readFileSync(join(s.cgroup, "cgroup.procs"), "utf8").split("\n").filter(Boolean))
      Bun.spawnSync(["sh", "-c", `echo ${pid} > ${parent}/cgroup.procs`]);
    rmdirSync(s.cgroup);
  } catch {}
  for (const m of ["cg", "bpffs"]) Bun.spawnSync(["umount", "-l", join(s.dir, m)], { stderr: "ignore" });
  rmSync(s.dir, { recursive: true, force: true });
}

export async function createSandbox(): Promise<Sandbox> {
  const dir = mkdtempSync(join(tmpdir(), "kpng-ebpf-"));
  mkdirSync(join(dir, "bpffs"));
  mkdirSync(join(dir, "cg"));
  await run(["mount", "-t", "bpf", "bpf", join(dir, "bpffs")]);
  await run(["mount", "-t", "cgroup2", "cgroup2", join(dir, "cg")]);
  const cgroup = join(dir, "cg", `kpng-test-${Math.random().toString(36).slice(2, 8)}`);
  mkdirSync(cgroup);
  const inCgroup = (argv: string[]) => ["sh", "-c", 'echo $$ > "$0" && exec "$@"', join(cgroup, "cgroup.procs"), ...argv];
  const python = async (ns: string, code: string, stdin?: string) =>
    run(
      inCgroup([
        "ip",
        "netns",
        "exec",
        ns,
        await pythonPath(),
        "-S",
        "-c",
        `import sys; sys.path.insert(0, ${JSON.stringify(harness)})\n${code}`,
      ]),
      stdin,
    );
  const sb: Sandbox = {
    dir,
    pinDir: join(dir, "bpffs", "kpng"),
    cgroup,
    inCgroup,
    python,
    async probeMany(ns, probes) {
      const out = await run(
        inCgroup(["ip", "netns", "exec", ns, await pythonPath(), "-S", join(harness, "probe.py")]),
        JSON.stringify(probes),
      );
      return JSON.parse(out) as ProbeResult[];
    },
    probeLoop: (ns, probes, pauseMs = 5) => startProbeLoop((argv) => inCgroup(["ip", "netns", "exec", ns, ...argv]), probes, pauseMs),
    async destroy() {
      if (!live.delete(sb)) return;
      cleanupSync(sb);
    },
  };
  live.add(sb);
  return sb;
}
