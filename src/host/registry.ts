// The built-in backends, loaded lazily: naming one on the command line imports
// only that one (the IPVS or Windows code never loads on an nft node).

import { invalid } from "../core/errors.ts";
import type { BackendFactory } from "./backend.ts";

type Loader = () => Promise<{ default: BackendFactory }>;

export const builtinBackends: Record<string, Loader> = {
  nft: () => import("../../plugins/nft/index.ts"),
  iptables: () => import("../../plugins/iptables/index.ts"),
  ipvs: () => import("../../plugins/ipvs/index.ts"),
  winkernel: () => import("../../plugins/winkernel/index.ts"),
  ebpf: () => import("../../plugins/ebpf/index.ts"),
  userspace: () => import("../../plugins/userspace/index.ts"),
};

export const builtinBackendNames = Object.keys(builtinBackends);

/** The loader of the built-in backend `name`; an unknown name is bad input that lists the known ones. */
export function builtinBackend(name: string): Loader {
  const load = Object.hasOwn(builtinBackends, name) ? builtinBackends[name] : undefined;
  if (!load) throw invalid(`--backend ${name}: unknown backend (known: ${builtinBackendNames.join(", ")})`);
  return load;
}
