// Drives the IPVS backend against a recorder and splits what it ran into the
// three outputs a golden test reads.

import { defaultConfig, type Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { NodeState, StateChange } from "../../src/core/brain/state.ts";
import { createIpvsBackend, type IpvsBackend } from "../../plugins/ipvs/backend.ts";
import { type Recorder, type RecorderOptions, recorder } from "../harness/command-recorder.ts";
import { plan, v4, v6 } from "../fixtures/addresses.ts";

export const N1 = v4.node(1);
export const N1v6 = v6.node(1);

export function testConfig(o: Partial<Config> = {}): Config {
  return defaultConfig({ nodeName: "node1", nodeIPs: [N1], clusterCIDRs: [plan.v4.clusterCIDR], ...o });
}

export interface Rig {
  backend: IpvsBackend;
  rec: Recorder;
  log: ReturnType<typeof memoryLogger>;
  out: string[];
}

export function rig(config: Config = testConfig(), opts: RecorderOptions = {}): Rig {
  const rec = recorder(opts);
  const log = memoryLogger();
  const out: string[] = [];
  const backend = createIpvsBackend({ config, log, out: (t) => out.push(t) }, { executor: rec, drainIntervalMs: 0 });
  return { backend, rec, log, out };
}

export const lines = (text: string) => text.split("\n").filter((l) => l.length > 0);

export interface Outputs {
  /** `ipvsadm -R` input, in order */
  ipvs: string[];
  /** `ipset restore` adds/dels, sorted (order does not matter), creates left out */
  sets: string[];
  /** `ip -batch -` input, sorted */
  addresses: string[];
}

/** What the commands recorded since the last clear() did. */
export function outputs(rec: Recorder): Outputs {
  return {
    ipvs: lines(rec.input("ipvsadm", "-R")),
    sets: lines(rec.input("ipset", "restore"))
      .filter((l) => !l.startsWith("create "))
      .sort(),
    addresses: lines(rec.input("ip", "-batch", "-")).sort(),
  };
}

export async function applyAndRecord(r: Rig, state: NodeState, change: StateChange): Promise<Outputs> {
  r.rec.clear();
  await r.backend.apply(state, change);
  return outputs(r.rec);
}
