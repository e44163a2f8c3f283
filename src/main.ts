#!/usr/bin/env bun
// kpng's command line: flags, subcommands and wiring. Only this file exits
// the process; everything below it throws KpngError.

import { defineCommand, runCommand as runCommand_, showUsage, type ArgsDef, type CommandDef } from "citty";
import { Brain } from "./core/brain.ts";
import { defaultConfig, type Config } from "./core/config.ts";
import { errorMessage, isInvalidArgument, KpngError } from "./core/errors.ts";
import { checkUnknownFlags, configFromFlags, listenArgs, proxyArgs, repeated, sourceArgs } from "./core/flags.ts";
import { createLogger } from "./core/log.ts";
import { formatLocalState } from "./core/output.ts";
import { nodeIPsFromBrain, startSource } from "./core/sources/index.ts";
import type { Backend, BackendContext } from "./plugins/backend.ts";
import { feedBackend } from "./plugins/feed.ts";
import { loadBackend } from "./plugins/loader.ts";

const log = createLogger("kpng");

type Args = Record<string, string | number | boolean | string[] | undefined>;

/** Flags (and later the --config file) -> Config; fails on unknown flags. */
async function loadConfig(args: Args, rawArgs: string[], defs: ArgsDef): Promise<Config> {
  checkUnknownFlags(rawArgs, defs);
  return configFromFlags(args, rawArgs, defaultConfig());
}

async function startBrain(args: Args, cfg: Config) {
  const brain = new Brain({ serviceProxyName: cfg.serviceProxyName, log });
  const source = await startSource({ input: args.input as string | undefined, kubeconfig: args.kubeconfig as string | undefined, master: args.master as string | undefined }, cfg, brain, log);
  return { brain, source };
}

async function loadBackends(rawArgs: string[], ctx: BackendContext): Promise<Backend[]> {
  const specs = [
    ...repeated(rawArgs, "backend", ["proxy-mode"]).map((builtin) => ({ builtin })),
    ...repeated(rawArgs, "plugin").map((plugin) => ({ plugin })),
  ];
  if (!specs.length) specs.push({ builtin: "nft" });
  const backends: Backend[] = [];
  for (const spec of specs) backends.push(await loadBackend(spec, ctx));
  return backends;
}

const runCommand = defineCommand({
  meta: { name: "kpng", description: "Kubernetes service proxy: the brain plus in-process backends" },
  args: { ...sourceArgs, ...proxyArgs, ...listenArgs },
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, { ...sourceArgs, ...proxyArgs, ...listenArgs });
    const ctx: BackendContext = { config: cfg, log, out: (t) => process.stdout.write(t) };
    const backends = await loadBackends(rawArgs, ctx);
    if (args.cleanup) {
      for (const b of backends) await b.cleanup?.(ctx);
      log.info("cleanup done", { backends: backends.map((b) => b.name).join(",") });
      return;
    }
    const { brain, source } = await startBrain(args, cfg);
    if (!cfg.nodeIPs.length) cfg.nodeIPs = nodeIPsFromBrain(brain, cfg.nodeName);
    for (const b of backends) await b.setup?.(ctx);
    const view = brain.view(cfg.nodeName);
    let pendingOnce = backends.length;
    const done = Promise.withResolvers<void>();
    for (const b of backends) {
      let first = true;
      const feed = feedBackend(b, {
        log,
        onSynced: () => {
          if (first && --pendingOnce === 0) done.resolve();
          first = false;
        },
      });
      view.subscribe((rev) => feed.push(rev));
    }
    log.info("started", { node: cfg.nodeName, backends: backends.map((b) => b.name).join(","), dryRun: cfg.dryRun });
    if (args.once) {
      await done.promise;
      source.close();
      for (const b of backends) await b.close?.();
      return;
    }
    await waitForSignal();
    source.close();
    for (const b of backends) await b.close?.();
  },
});

const localCommand = defineCommand({
  meta: { name: "local", description: "print the node-local state and exit" },
  args: { ...sourceArgs, output: { type: "string", alias: ["o"], default: "json", description: "json or yaml" } },
  async run({ args, rawArgs }) {
    const cfg = await loadConfig(args, rawArgs, { ...sourceArgs, output: { type: "string", alias: ["o"] } });
    if (args.output !== "json" && args.output !== "yaml") throw new KpngError("invalid_argument", `flag --output: "${args.output}" must be json or yaml`);
    const { brain, source } = await startBrain(args, cfg);
    const state = await brain.view(cfg.nodeName).next(0);
    source.close();
    process.stdout.write(formatLocalState(state, args.output));
  },
});

function waitForSignal(): Promise<void> {
  return new Promise((resolve) => {
    const stop = (sig: string) => {
      log.info("shutting down", { signal: sig });
      resolve();
    };
    process.once("SIGINT", () => stop("SIGINT"));
    process.once("SIGTERM", () => stop("SIGTERM"));
  });
}

const subCommands: Record<string, CommandDef<any>> = { local: localCommand };

/** Bad input -> one line and exit 2; anything else -> exit 1. */
function fail(err: unknown): never {
  process.stderr.write(`kpng: ${errorMessage(err)}\n`);
  process.exit(isInvalidArgument(err) ? 2 : 1);
}

// citty would also run the parent's `run` after a subcommand, so dispatch here.
const argv = process.argv.slice(2);
const sub = subCommands[argv[0] ?? ""];
const [cmd, rawArgs] = sub ? [sub, argv.slice(1)] : [runCommand, argv];
process.on("unhandledRejection", fail);
try {
  if (rawArgs.includes("--help") || rawArgs.includes("-h")) await showUsage(cmd);
  else await runCommand_(cmd, { rawArgs });
} catch (err) {
  fail(err);
}
process.exit(0);
