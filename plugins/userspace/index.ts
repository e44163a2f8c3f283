// `kpng --backend userspace`: a relay per service frontend in this process,
// reached by local routes or an nftables redirect (backend.ts).

import type { BackendFactory } from "../../src/host/toolkit/index.ts";
import { UserspaceBackend } from "./backend.ts";

export { UserspaceBackend, createUserspaceBackend, describe, type UserspaceOptions } from "./backend.ts";

export default ((ctx) => new UserspaceBackend(ctx)) satisfies BackendFactory;
