// `bun run bench cli`: what kube-proxy compatibility costs at start-up: the
// parse of a long kube-proxy argument list, a kubeadm ConfigMap decoded with
// its field warnings, and the whole process for --version and for
// `--config kubeadm --dry-run --once` (iptables, the example cluster).
// Figures only, no assertions.

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgv } from "../src/core/config/argv.ts";
import { parseKubeProxyConfig } from "../src/core/config/config-file.ts";
import { kubeProxyArgs, logArgs } from "../src/core/config/kube-proxy-flags.ts";
import { listenArgs, proxyArgs, sourceArgs } from "../src/core/config/flags.ts";
import { ROOT } from "../test/harness/kpng-process.ts";

const ARGS = [
  "--v=2",
  "--proxy-mode=iptables",
  "--hostname-override=node-1",
  "--cluster-cidr=198.19.0.0/16",
  "--conntrack-max-per-core=0",
  "--oom-score-adj=-998",
  "--feature-gates=A=true,B=false",
  "--kube-api-qps=20",
  "--kube-api-burst=40",
  "--detect-local-mode=ClusterCIDR",
  "--metrics-bind-address=0.0.0.0:10249",
  "--healthz-bind-address",
  "0.0.0.0:10256",
  "--iptables-sync-period=30s",
  "--logging-format=json",
];

const perOp = (n: number, f: () => void) => {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) f();
  return ((performance.now() - t0) * 1000) / n;
};

const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function processMs(args: string[], runs: number): Promise<number> {
  const ms: number[] = [];
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    const p = Bun.spawn([process.execPath, join(ROOT, "src/main.ts"), ...args], { cwd: ROOT, stdout: "ignore", stderr: "ignore" });
    await p.exited;
    ms.push(performance.now() - t0);
  }
  return median(ms);
}

export default async function () {
  const defs = { ...sourceArgs, ...proxyArgs, ...listenArgs, ...kubeProxyArgs, ...logArgs };
  console.log(`parse ${ARGS.length} kube-proxy arguments: ${perOp(20_000, () => parseArgv(ARGS, defs)).toFixed(2)} µs`);
  const kubeadm = readFileSync(join(ROOT, "test/config/golden/kubeadm.v1alpha1.yaml"), "utf8");
  console.log(
    `decode kubeadm's ConfigMap (strict, defaults, conversion, field warnings): ${perOp(500, () => parseKubeProxyConfig("kubeadm.yaml", kubeadm)).toFixed(0)} µs`,
  );
  const cfg = join(ROOT, "test/config/golden/kubeadm.v1alpha1.yaml");
  console.log(`process, --version: ${(await processMs(["--version"], 5)).toFixed(0)} ms (median of 5)`);
  console.log(
    `process, kubeadm ConfigMap, --input example --dry-run --once: ${(await processMs([`--config=${cfg}`, "--hostname-override=node-1", "--input", "examples/cluster.yaml", "--dry-run", "--once"], 5)).toFixed(0)} ms (median of 5)`,
  );
}
