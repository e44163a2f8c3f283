// The only code that runs ipvsadm / ipset / iptables-restore / ip. Errors come
// back as one-line KpngErrors; a kernel without IPVS is `unavailable` so the
// CLI can say so at start-up instead of failing every sync.

import { type Executor, KpngError, runCommand } from "../../src/host/toolkit/index.ts";

export interface CommandExecutorOptions {
  /** argv prefix, e.g. ["ip", "netns", "exec", NS] to run inside a network namespace */
  prefix?: string[];
}

const oneLine = (s: string) => s.replace(/\s+/g, " ").trim();

/** Recognises "this kernel has no IPVS" in a tool's stderr (ipvsadm: "Can't initialize ipvs: Protocol not available"). */
const NO_IPVS = /Can't initialize ipvs|Protocol not available/i;
export const lacksIpvs = (stderr: string) => NO_IPVS.test(stderr);

/** The line that says why: with kmod installed, ipvsadm's first line is modprobe's complaint, not the kernel's answer. */
const reasonLine = (stderr: string) => stderr.split("\n").find((l) => NO_IPVS.test(l)) ?? "";

export function commandError(argv: readonly string[], code: number, stderr: string): KpngError {
  if (argv[0] === "ipvsadm" && lacksIpvs(stderr)) {
    return new KpngError(
      "unavailable",
      `ipvs: this kernel has no IP Virtual Server support (ipvsadm: ${oneLine(reasonLine(stderr))}); load the ip_vs modules or use --backend=nft`,
    );
  }
  const detail = oneLine(stderr).slice(0, 300) || "no error output";
  return new KpngError("internal", `ipvs: ${argv.join(" ")} failed with exit code ${code}: ${detail}`);
}

export function commandExecutor(opts: CommandExecutorOptions = {}): Executor {
  const prefix = opts.prefix ?? [];
  return {
    async run(argv, stdin) {
      const { code, stdout, stderr } = await runCommand([...prefix, ...argv], stdin);
      if (code !== 0) throw commandError(argv, code, stderr);
      return stdout;
    },
  };
}

/** `--dry-run`: print each command and its input instead of running it. */
export function printingExecutor(out: (text: string) => void): Executor {
  return {
    async run(argv, stdin) {
      out(`# ${argv.join(" ")}\n${stdin ?? ""}`);
      return "";
    },
  };
}
