// The one door to the node's configuration: `ip` and `nft` run as processes.
// Tests and --dry-run swap in a recorder (the Executor interface).

import type { Executor } from "../../src/plugins/toolkit/index.ts";

export const processExecutor = (): Executor => ({
  async run(argv, stdin) {
    const p = Bun.spawn(argv, { stdin: stdin === undefined ? "ignore" : new TextEncoder().encode(stdin), stdout: "pipe", stderr: "pipe" });
    const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
    if (code !== 0) throw new Error(`${argv.join(" ")}: exit ${code}: ${err.trim()}`);
    return out;
  },
});
