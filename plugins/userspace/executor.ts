// The one door to the node's configuration: `ip` and `nft` run as processes.
// Tests and --dry-run swap in a recorder (the Executor interface).

import { runCommand, type Executor } from "../../src/host/toolkit/index.ts";

export const processExecutor = (): Executor => ({
  async run(argv, stdin) {
    const { code, stdout, stderr } = await runCommand(argv, stdin);
    if (code !== 0) throw new Error(`${argv.join(" ")}: exit ${code}: ${stderr.trim()}`);
    return stdout;
  },
});
