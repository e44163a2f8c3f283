// The leftovers sweep at scale: kube-proxy's rules of 1,000 and 10,000
// services x 10 endpoints, in its iptables mode (nf_tables flavour: ~11
// chains per service) and its nftables mode (a chain per service and per
// endpoint), loaded into a network namespace made for the run; then what the
// start-up migration does with them: list the node, plan (pure), remove.
// Prints figures, asserts nothing. `bun run bench migrate`.

import { createLogger } from "../src/core/log.ts";
import type { Executor } from "../src/host/backend.ts";
import { listNode, removeLeftovers } from "../src/host/leftovers/index.ts";
import { planLeftovers } from "../src/host/leftovers/plan.ts";
import { spawnExecutor } from "../plugins/iptables/executor.ts";
import { v4 } from "../test/fixtures/addresses.ts";

const sizes = [1_000, 10_000];
const endpointsPer = 10;
const ms = (t: number) => `${t.toFixed(0)} ms`;
const clusterIP = (i: number) => v4.clusterIP(i % 4096);
const port = (i: number) => 80 + Math.floor(i / 4096);
const pod = (k: number) => v4.pod((k >> 8) & 255, k & 255);
const hash = (s: string) => new Bun.CryptoHasher("sha256").update(s).digest("hex").slice(0, 16).toUpperCase();

/** kube-proxy's iptables mode for n services (iptables-restore input, with the bulk preamble kube-proxy's size needs) */
function iptablesRules(n: number): string {
  const chains: string[] = [":KUBE-SERVICES - [0:0]", ":KUBE-MARK-MASQ - [0:0]", ":KUBE-POSTROUTING - [0:0]", ":KUBE-NODEPORTS - [0:0]"];
  const rules: string[] = [
    '-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES',
    '-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING',
    "-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000",
  ];
  for (let i = 0; i < n; i++) {
    const svc = `KUBE-SVC-${hash(`svc${i}`)}`;
    chains.push(`:${svc} - [0:0]`);
    rules.push(`-A KUBE-SERVICES -d ${clusterIP(i)}/32 -p tcp -m tcp --dport ${port(i)} -j ${svc}`);
    for (let e = 0; e < endpointsPer; e++) {
      const sep = `KUBE-SEP-${hash(`sep${i}/${e}`)}`;
      const ip = pod(i * endpointsPer + e);
      chains.push(`:${sep} - [0:0]`);
      rules.push(e < endpointsPer - 1 ? `-A ${svc} -m statistic --mode random --probability 0.1 -j ${sep}` : `-A ${svc} -j ${sep}`);
      rules.push(`-A ${sep} -s ${ip}/32 -j KUBE-MARK-MASQ`, `-A ${sep} -p tcp -m tcp -j DNAT --to-destination ${ip}:8080`);
    }
  }
  return ["*nat", ":PREROUTING - [0:0]", ":OUTPUT - [0:0]", ":POSTROUTING - [0:0]", "-S", ...chains, ...rules, "COMMIT", ""].join("\n");
}

/** kube-proxy's nftables mode for n services: a chain per service and per endpoint, one map entry per service */
function nftRules(n: number): string {
  const out = [
    "table ip kube-proxy {",
    "  set cluster-ips { type ipv4_addr; }",
    "  map service-ips { type ipv4_addr . inet_proto . inet_service : verdict; }",
    "  chain nat-prerouting { type nat hook prerouting priority -100; policy accept; ip daddr . meta l4proto . th dport vmap @service-ips; }",
  ];
  const elements: string[] = [];
  for (let i = 0; i < n; i++) {
    const eps = Array.from(
      { length: endpointsPer },
      (_, e) => `endpoint-${hash(`ep${i}/${e}`).slice(0, 8)}-bench/svc-${i}/tcp/http__${pod(i * endpointsPer + e)}/8080`,
    );
    eps.forEach((c, e) => out.push(`  chain ${c} { meta l4proto tcp dnat to ${pod(i * endpointsPer + e)}:8080; }`));
    const svc = `service-${hash(`svc${i}`).slice(0, 8)}-bench/svc-${i}/tcp/http`;
    out.push(`  chain ${svc} { numgen random mod ${endpointsPer} vmap { ${eps.map((c, e) => `${e} : goto ${c}`).join(", ")} }; }`);
    elements.push(`${clusterIP(i)} . tcp . ${port(i)} : goto ${svc}`);
  }
  out.push("}", `add element ip kube-proxy service-ips { ${elements.join(", ")} }`, "");
  return out.join("\n");
}

async function inNamespace(body: (exec: Executor) => Promise<void>) {
  const ns = `kpmb${Math.random().toString(36).slice(2, 8)}`;
  const host = spawnExecutor();
  await host.run(["ip", "netns", "add", ns]);
  try {
    await body(spawnExecutor(["ip", "netns", "exec", ns]));
  } finally {
    await host.run(["ip", "netns", "del", ns]);
  }
}

async function sweep(mode: string, n: number, load: (exec: Executor) => Promise<void>) {
  await inNamespace(async (exec) => {
    const t0 = performance.now();
    await load(exec);
    const loaded = performance.now() - t0;
    const t1 = performance.now();
    const listing = await listNode(exec);
    const listed = performance.now() - t1;
    const t2 = performance.now();
    planLeftovers(listing, { owners: ["kube-proxy"] });
    const planned = performance.now() - t2;
    const t3 = performance.now();
    const { failures } = await removeLeftovers({ exec, log: createLogger("bench", { level: "warn" }), owners: ["kube-proxy"] });
    const whole = performance.now() - t3;
    console.log(
      `${mode} ${n.toLocaleString("en")} services x ${endpointsPer}: kube-proxy's load ${ms(loaded)}; sweep: list ${ms(listed)}, plan ${ms(planned)}, whole sweep (list, plan, remove) ${ms(whole)}${failures.length ? ` FAILED: ${failures[0]}` : ""}`,
    );
  });
}

export default async function run() {
  for (const n of sizes)
    await sweep("iptables mode (iptables-nft)", n, (exec) =>
      exec.run(["iptables-nft-restore", "--noflush"], iptablesRules(n)).then(() => {}),
    );
  for (const n of sizes) await sweep("nftables mode", n, (exec) => exec.run(["nft", "-f", "-"], nftRules(n)).then(() => {}));
}
