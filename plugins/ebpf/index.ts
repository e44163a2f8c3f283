// `kpng --backend ebpf`: socket-level load balancing at the cgroup v2
// sock_addr hooks, composed with the nft backend for packets from elsewhere
// (backend.ts).

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { createEbpfBackend } from "./backend.ts";

export { EbpfBackend, createEbpfBackend, type EbpfOptions, type SyncStats } from "./backend.ts";

export default ((ctx) => createEbpfBackend(ctx)) satisfies BackendFactory;
