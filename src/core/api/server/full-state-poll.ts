// `/localv1.Endpoints/Next`: the full-state long poll. The first item tells
// the client what to send next time (this brain's InstanceID and the
// revision sent); then one item per service. A client that names another
// brain instance or an older revision gets the current state at once; one
// that is up to date waits for the next revision.

import type { NextFilter } from "../../../gen/localv1/services_pb.ts";
import type { NodeView } from "../../brain/brain.ts";
import type { NodeState } from "../../brain/state.ts";

export interface NextDeps {
  instanceID: bigint;
  defaultNodeName: string;
  view(nodeName: string, signal: AbortSignal): Promise<NodeView>;
}

/** The state a Next call answers with, waiting when the caller is up to date. */
export async function nextState(deps: NextDeps, filter: NextFilter, signal: AbortSignal): Promise<{ nodeName: string; state: NodeState }> {
  const nodeName = filter.NodeName || deps.defaultNodeName;
  const view = await deps.view(nodeName, signal);
  let state = view.state ?? (await view.next(0, signal));
  if (filter.InstanceID === deps.instanceID && filter.Rev === BigInt(state.rev)) state = await view.next(state.rev, signal);
  return { nodeName, state };
}
