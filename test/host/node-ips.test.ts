// Every backend that uses the node's IPs takes them from the node-local state
// (NodeState.nodeIPs, kept current by the brain), through the same feed the
// run command uses, and re-programs what depends on them when they change.
// A state without them (a sidecar's: the wire does not carry them) falls
// back to Config.nodeIPs (--node-ip).

import { describe, expect, test } from "bun:test";
import { createNftBackend } from "../../plugins/nft/index.ts";
import { IptablesBackend } from "../../plugins/iptables/index.ts";
import { recordingExecutor } from "../../plugins/iptables/executor.ts";
import { createIpvsBackend } from "../../plugins/ipvs/backend.ts";
import { recorder } from "../harness/command-recorder.ts";
import { createWinkernelBackend } from "../../plugins/winkernel/backend.ts";
import { hnsRecorder } from "../../plugins/winkernel/recorder.ts";
import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { NodeState } from "../../src/core/brain/state.ts";
import type { Backend } from "../../src/host/backend.ts";
import { feedBackend } from "../../src/host/feed.ts";
import { plan, v4 } from "../fixtures/addresses.ts";
import { endpoint, entry, nodeState, service } from "../fixtures/state.ts";

const OLD = v4.node(1);
const NEW = v4.node(2);
const FLAG = v4.node(3);

/** A LoadBalancer with a node port and source ranges that hold the node's old and new IPs. */
const lb = entry(
  service({
    name: "web",
    clusterIPs: [v4.clusterIP(1)],
    lbIPs: [v4.external(1)],
    sourceRanges: [`${plan.v4.nodeCIDR}`],
    ports: [{ name: "http", port: 80, nodePort: 30080, targetPort: 8080 }],
  }),
  { a: endpoint({ ips: [v4.pod(2, 1)], ports: { http: 8080 } }) },
);
const withIPs = (rev: number, nodeIPs?: string[]): NodeState => ({
  ...nodeState({ nodeName: "node1", rev, entries: [lb] }),
  ...(nodeIPs && { nodeIPs }),
});

/** Feeds `states` as the run command does (first change set null, then the given one), returns what each sync wrote. */
async function feed(
  backend: Backend,
  written: () => string,
  states: Array<{ state: NodeState; change: ReadonlySet<string> | null }>,
): Promise<string[]> {
  const out: string[] = [];
  const synced: Array<() => void> = [];
  const f = feedBackend(backend, { log: memoryLogger(), onSynced: () => synced.shift()?.() });
  for (const s of states) {
    const done = new Promise<void>((resolve) => synced.push(resolve));
    f.push({ state: s.state, change: s.change });
    await done;
    out.push(written());
  }
  f.stop();
  return out;
}

const cfg = (o: Partial<Config> = {}) => defaultConfig({ nodeName: "node1", clusterCIDRs: [plan.v4.clusterCIDR], dryRun: true, ...o });
const ctx = (config: Config, printed: string[]) => ({ config, log: memoryLogger(), out: (t: string) => printed.push(t) });
const take = (printed: string[]) => () => printed.splice(0).join("");

interface Case {
  name: string;
  make: (config: Config) => { backend: Backend; written: () => string };
  config?: Partial<Config>;
  /** what the output says about node IP `ip` */
  mentions: (ip: string) => RegExp;
}

const cases: Case[] = [
  {
    name: 'nft: nodeport-ips (default "primary")',
    make: (c) => {
      const printed: string[] = [];
      return { backend: createNftBackend(ctx(c, printed)), written: take(printed) };
    },
    mentions: (ip) => new RegExp(`add element ip kpng nodeport-ips \\{ ${ip.replaceAll(".", "\\.")} \\}`),
  },
  {
    name: "iptables: --nodeport-addresses primary",
    config: { nodePortAddresses: ["primary"] },
    make: (c) => {
      const printed: string[] = [];
      return {
        backend: new IptablesBackend(ctx(c, printed), { executor: recordingExecutor(), families: ["v4"], monitorPeriodMs: 0 }),
        written: take(printed),
      };
    },
    mentions: (ip) => new RegExp(`-d ${ip.replaceAll(".", "\\.")} -j KPNG-NODEPORTS`),
  },
  {
    name: "ipvs: node-port virtual servers",
    make: (c) => {
      const rec = recorder();
      const backend = createIpvsBackend(ctx(c, []), { executor: rec, drainIntervalMs: 0 });
      return {
        backend,
        written: () => {
          const text = rec.input("ipvsadm", "-R");
          rec.clear();
          return text;
        },
      };
    },
    mentions: (ip) => new RegExp(`-A -t ${ip.replaceAll(".", "\\.")}:30080`),
  },
  {
    name: "winkernel: the source VIP when winkernel.sourceVip is unset",
    config: { dryRun: false },
    make: (c) => {
      const hns = hnsRecorder();
      return {
        backend: createWinkernelBackend(ctx(c, []), { hns }),
        written: () => {
          const text = JSON.stringify(hns.calls);
          hns.clear();
          return text;
        },
      };
    },
    mentions: (ip) => new RegExp(`"SourceVIP":"${ip.replaceAll(".", "\\.")}"`),
  },
];

describe("backends follow the node's IPs from the node-local state", () => {
  for (const c of cases) {
    test(`${c.name}: programmed on the Node's IP, moved when it changes`, async () => {
      const { backend, written } = c.make(cfg(c.config));
      await backend.setup?.(ctx(cfg(c.config), []));
      const [first, second] = await feed(backend, written, [
        { state: withIPs(1, [OLD]), change: null },
        { state: withIPs(2, [NEW]), change: null }, // the brain's revision for a node IP change
      ]);
      expect(first).toMatch(c.mentions(OLD));
      expect(second).toMatch(c.mentions(NEW));
      expect(second).not.toMatch(c.mentions(OLD));
      await backend.close?.();
    });

    test(`${c.name}: a state without node IPs (a sidecar's) uses --node-ip`, async () => {
      const { backend, written } = c.make(cfg({ ...c.config, nodeIPs: [FLAG] }));
      await backend.setup?.(ctx(cfg(c.config), []));
      const [first] = await feed(backend, written, [{ state: withIPs(1), change: null }]);
      expect(first).toMatch(c.mentions(FLAG));
      await backend.close?.();
    });
  }
});
