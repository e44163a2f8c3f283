// Shared bits of the Kubernetes-source suites: a temp dir with a test
// certificate, polling, and a brain wired to the kube source.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Brain } from "../../../src/core/brain/brain.ts";
import { defaultConfig, type Config } from "../../../src/core/config/config.ts";
import { memoryLogger } from "../../../src/core/log.ts";
import { startKubeSource, type KubeSource } from "../../../src/core/sources/kube.ts";
import { type FakeApiServer, makeTestCert, type TestCert } from "../../harness/api-server.ts";
import { LOADED_WAIT_MS } from "../../harness/kpng-process.ts";

export const NODE = "node-1";

export function tempDir(prefix = "kpng-kube-"): { dir: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true }) };
}

let cert: TestCert | undefined;
/** One certificate per test process (openssl takes a few ms). */
export function testCert(dir: string): TestCert {
  return (cert ??= makeTestCert(dir));
}

export async function waitFor<T>(
  what: string,
  f: () => T | undefined | false | null | Promise<T | undefined | false | null>,
  // against a hang only: it returns as soon as `f` holds, and a loaded machine takes seconds
  timeoutMs = LOADED_WAIT_MS,
): Promise<T> {
  const end = performance.now() + timeoutMs;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(10);
  }
}

export interface Rig {
  /** the fake API server it reads, when it reads one (rigAt: any API server) */
  api: FakeApiServer;
  brain: Brain;
  source: KubeSource;
  log: ReturnType<typeof memoryLogger>;
  /** service keys of this node's latest state */
  keys(): string[];
  rev(): number;
  close(): Promise<void>;
}

/** A brain fed by the kube source from `api` (started, with short backoffs). */
export async function rig(api: FakeApiServer, dir: string, cfg: Partial<Config> = {}): Promise<Rig> {
  return { ...(await rigAt(api.writeKubeconfig(dir), cfg)), api };
}

/** A brain fed by the kube source from the API server `kubeconfig` names (the real one: KubeApiServer.writeKubeconfig). */
export async function rigAt(kubeconfig: string, cfg: Partial<Config> = {}): Promise<Omit<Rig, "api">> {
  const brain = new Brain({ serviceProxyName: cfg.serviceProxyName });
  const log = memoryLogger();
  const source = await startKubeSource({
    kubeconfig,
    brain,
    log,
    config: defaultConfig({ nodeName: NODE, minSyncPeriodSeconds: 0.02, ...cfg }),
    backoff: { initialMs: 40, maxMs: 200 },
  });
  const view = brain.view(NODE);
  return {
    brain,
    source,
    log,
    keys: () => [...(view.state?.services.keys() ?? [])].sort(),
    rev: () => view.state?.rev ?? 0,
    close: async () => source.close(),
  };
}
