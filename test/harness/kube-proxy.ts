// The real kube-proxy (the 1.36.2 binary beside kube-apiserver, see
// kube-apiserver.ts) run inside a node's network namespace against the real
// API server, as a kubeadm DaemonSet runs it: `--config` (a
// KubeProxyConfiguration: the kubeconfig of user system:kube-proxy, the mode,
// the cluster CIDR) and `--hostname-override` (the pod's NODE_NAME). Its rules
// land in that namespace only, never on the host.
//
// Which iptables it writes with: kube-proxy runs whatever `iptables` its PATH
// holds (the image's iptables-wrapper picks a flavour). `iptables: "legacy"`
// or "nft" puts a directory first in its PATH whose iptables, ip6tables and
// their -save/-restore are that flavour's; `iptables: "none"` one where they
// and ipset fail, so nftables mode's start-up cleanup of the iptables and IPVS
// modes (it removes them on a node switching mode: server_linux.go
// platformCleanup) cannot run, for a test that wants every mode's rules at once.
//
// Settings a test namespace needs: conntrack.maxPerCore 0 (nf_conntrack_max
// is global, not per namespace: kube-proxy leaves it alone), metrics and
// healthz on 127.0.0.1 of the namespace.

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { plan } from "../fixtures/addresses.ts";
import { requireK8s, type KubeApiServer } from "./kube-apiserver.ts";

export type ProxyMode = "iptables" | "nftables" | "ipvs";
export type IptablesFlavour = "legacy" | "nft" | "none";

export interface KubeProxy {
  readonly proc: Bun.Subprocess;
  /** its log so far (stderr, klog lines) */
  readonly log: string[];
  /** resolves when `done(rules)` holds for kube-proxy's rules as the tools print them (bounded; throws with its log) */
  waitForRules(done: (rules: string) => boolean, timeoutMs?: number): Promise<string>;
  /** resolves with its first log line matching `re` (bounded; throws with its log if it exits first) */
  waitForLog(re: RegExp, timeoutMs?: number): Promise<string>;
  /** its rules of its mode, as `iptables-save` / `ip6tables-save` / `nft list table` print them */
  rules(): Promise<string>;
  /** SIGTERM (a DaemonSet's pod deleted): kube-proxy exits and its rules stay */
  stop(): Promise<number | null>;
}

export interface KubeProxyOptions {
  api: KubeApiServer;
  /** the node's network namespace; the API server must be reachable there as https://127.0.0.1:6443 (api.reach(ns)) */
  ns: string;
  mode: ProxyMode;
  /** the Node object's name (it must exist, with an InternalIP) */
  nodeName: string;
  /** where its kubeconfig, config file and PATH directory go */
  dir: string;
  /** default: the `iptables` of the host's PATH */
  iptables?: IptablesFlavour;
  /** klog verbosity (default 2: it logs each sync) */
  verbosity?: number;
}

const TOOLS = ["iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"];
/** hidden too with "none" */
const HIDDEN = [...TOOLS, "ipset"];

/** A directory whose iptables tools are `flavour`'s (scripts running /usr/sbin/*-legacy or *-nft), or fail with ipset ("none"). */
function toolDir(dir: string, flavour: IptablesFlavour): string {
  const bin = join(dir, `iptables-${flavour}`);
  mkdirSync(bin, { recursive: true });
  for (const t of flavour === "none" ? HIDDEN : TOOLS) {
    const target = t.replace(/^(ip6?tables)/, `$1-${flavour}`);
    const body =
      flavour === "none"
        ? `#!/bin/sh\necho "${t}: hidden from kube-proxy by the test" >&2\nexit 1\n`
        : `#!/bin/sh\nexec /usr/sbin/${target} "$@"\n`;
    writeFileSync(join(bin, t), body, { mode: 0o755 });
  }
  return bin;
}

async function runIn(ns: string, argv: string[], env?: Record<string, string>): Promise<string> {
  const p = Bun.spawn(["ip", "netns", "exec", ns, ...argv], { stdout: "pipe", stderr: "pipe", env: { ...process.env, ...env } });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${argv.join(" ")} in ${ns}: exit ${code}: ${err.trim()}`);
  return out;
}

const running = new Set<Bun.Subprocess>();
process.on("exit", () => {
  for (const p of running) p.kill("SIGKILL");
});

/** Starts kube-proxy; resolves once it runs (not once it has synced: see waitForRules). */
export async function startKubeProxy(o: KubeProxyOptions): Promise<KubeProxy> {
  const bin = requireK8s();
  mkdirSync(o.dir, { recursive: true });
  const kubeconfig = o.api.writeKubeconfig(join(o.dir, `kube-proxy-${o.mode}.kubeconfig`), {
    server: "https://127.0.0.1:6443",
    user: "kube-proxy",
  });
  // kubeadm's ConfigMap kube-proxy/config.conf, with what a test namespace needs
  const config = join(o.dir, `kube-proxy-${o.mode}.conf`);
  writeFileSync(
    config,
    JSON.stringify({
      apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
      kind: "KubeProxyConfiguration",
      clientConnection: { kubeconfig },
      mode: o.mode,
      clusterCIDR: `${plan.v4.clusterCIDR},${plan.v6.clusterCIDR}`,
      bindAddress: "0.0.0.0",
      healthzBindAddress: "127.0.0.1:10256",
      metricsBindAddress: "127.0.0.1:10249",
      conntrack: { maxPerCore: 0 },
    }),
  );
  const path = o.iptables ? `${toolDir(o.dir, o.iptables)}:${process.env.PATH}` : (process.env.PATH ?? "");
  const proc = Bun.spawn(
    [
      "ip",
      "netns",
      "exec",
      o.ns,
      "setpriv",
      "--pdeathsig",
      "KILL",
      "--",
      bin.kubeProxy,
      `--config=${config}`,
      `--hostname-override=${o.nodeName}`,
      `--v=${o.verbosity ?? 2}`,
    ],
    { stdin: "ignore", stdout: "pipe", stderr: "pipe", env: { ...process.env, PATH: path } },
  );
  running.add(proc);
  const log: string[] = [];
  const pump = async (s: ReadableStream<Uint8Array>) => {
    const dec = new TextDecoder();
    let rest = "";
    for await (const chunk of s) {
      const lines = (rest + dec.decode(chunk, { stream: true })).split("\n");
      rest = lines.pop()!;
      log.push(...lines);
    }
    if (rest) log.push(rest);
  };
  void pump(proc.stdout);
  void pump(proc.stderr);

  const env = { PATH: path };
  const rules = async (): Promise<string> => {
    if (o.mode === "nftables") {
      let out = "";
      for (const family of ["ip", "ip6"]) out += await runIn(o.ns, ["nft", "list", "table", family, "kube-proxy"]).catch(() => "");
      return out;
    }
    return (await runIn(o.ns, ["iptables-save"], env).catch(() => "")) + (await runIn(o.ns, ["ip6tables-save"], env).catch(() => ""));
  };

  /** its exit, or running after `timeoutMs`, with the last of its log: for a failure message */
  const state = (timeoutMs: number) =>
    `kube-proxy (${o.mode}) ${proc.exitCode !== null ? `exited (${proc.exitCode})` : `not done within ${timeoutMs} ms`}; its log:\n${log.slice(-30).join("\n")}`;

  return {
    proc,
    log,
    rules,
    async waitForLog(re, timeoutMs = 60_000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const line = log.find((l) => re.test(l));
        if (line) return line;
        if (proc.exitCode !== null || Date.now() > end) {
          await Bun.sleep(50); // the last lines of an exit are pumped after it
          const late = log.find((l) => re.test(l));
          if (late) return late;
          throw new Error(`no ${re}: ${state(timeoutMs)}`);
        }
        await Bun.sleep(100);
      }
    },
    async waitForRules(done, timeoutMs = 60_000) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const r = await rules();
        if (done(r)) return r;
        if (proc.exitCode !== null || Date.now() > end) throw new Error(state(timeoutMs));
        await Bun.sleep(200);
      }
    },
    async stop() {
      if (proc.exitCode === null) proc.kill("SIGTERM");
      // bounded: a kube-proxy that ignores SIGTERM is killed (its rules stay either way)
      const t = setTimeout(() => proc.kill("SIGKILL"), 15_000);
      const code = await proc.exited;
      clearTimeout(t);
      running.delete(proc);
      return code;
    },
  };
}
