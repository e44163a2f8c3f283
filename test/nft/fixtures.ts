// The nft suites' view of the shared state builders (test/fixtures/state.ts):
// node 0, endpoints local by default; plus a context and a command recorder.

import type { Config } from "../../src/core/config/config.ts";
import { memoryLogger } from "../../src/core/log.ts";
import type { Endpoint, NodeState, ServiceEndpoints } from "../../src/core/brain/state.ts";
import type { BackendContext, Executor } from "../../src/host/backend.ts";
import * as S from "../fixtures/state.ts";

export type SvcSpec = S.ServiceSpec;
export type EpSpec = S.EndpointSpec;
export { entry, service as svc, serviceKey as key } from "../fixtures/state.ts";
export { node0Config as nodeConfig } from "../fixtures/node-config.ts";

/** endpoints here are on this node unless said otherwise */
export const ep = (e: EpSpec): Endpoint => S.endpoint({ ...e, local: e.local ?? true });

export const nodeState = (entries: ServiceEndpoints[], rev = 1): NodeState => S.nodeState({ nodeName: "node0", rev, entries });

export const nextState = (prev: NodeState, replace: ServiceEndpoints[], remove: string[] = []) =>
  S.nextState(prev, { set: replace, remove });

/** a backend context that keeps what it printed (dry-run) and logged */
export function context(config: Config): BackendContext & { printed: string[]; lines: string[] } {
  const printed: string[] = [];
  const log = memoryLogger();
  return { config, log, out: (t) => printed.push(t), printed, lines: log.lines };
}

/** records every command; `fail` decides which ones throw; `nft -j list` answers that kpng's tables hold nothing */
export function recorder(fail: (argv: string[], stdin?: string) => string | undefined = () => undefined) {
  const calls: { argv: string[]; stdin?: string }[] = [];
  const exec: Executor = {
    run: async (argv, stdin) => {
      calls.push({ argv, stdin });
      const err = fail(argv, stdin);
      if (err) throw new Error(err);
      return argv[0] === "nft" && argv.includes("list") ? '{"nftables": []}' : "";
    },
  };
  return { exec, calls };
}

/** a recorded nft transaction (`nft -f -`), not a listing nor another command */
export const isTransaction = (c: { argv: string[] }) => c.argv[0] === "nft" && c.argv.includes("-f");
