// The nft backend programming a test topology's node namespace for real, as
// the repair suites run it: transactions through `ip netns exec`, and the
// interactive nft and the monitor that watch the kernel there too.

import { processSpawner } from "../../plugins/nft/executor.ts";
import { createNftBackend, type NftBackend } from "../../plugins/nft/index.ts";
import type { BackendContext } from "../../src/host/backend.ts";
import type { Topology } from "../harness/netns.ts";

export function nftInNode(ctx: BackendContext, topo: Topology): NftBackend {
  const prefix = ["ip", "netns", "exec", topo.node.ns];
  return createNftBackend(ctx, {
    exec: topo.executor(topo.node.ns),
    interactive: processSpawner(prefix),
    monitor: processSpawner(prefix),
    netns: topo.node.ns,
  });
}
