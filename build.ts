// `bun run build`: the single executable (dist/kpng), as `bun build --compile
// --bytecode --format=esm src/main.ts` makes it, with one bundler plugin.
//
// @kubernetes/client-node's KubeConfig (kubeconfig, credentials) lives in
// dist/config.js, which imports the generated API clients (gen/index.js:
// ~700 KB of model and API classes) only for makeApiClient's
// createConfiguration and ServerConfiguration. kpng never makes an API client,
// yet every run paid for evaluating them: ~4 MB RSS (bench startup at 10 and
// 1,000 services). The plugin points that one import at the two modules that
// define those names, so makeApiClient still works; nothing else changes.
//
//   bun build.ts --outfile dist/kpng

import type { BunPlugin } from "bun";
import { dirname, join } from "node:path";

const ROOT = import.meta.dir;

const clientNodeConfigOnly: BunPlugin = {
  name: "client-node config without the generated API",
  setup(build) {
    build.onResolve({ filter: /^\.\/gen\/index\.js$/ }, (args) =>
      /@kubernetes[/\\]client-node[/\\]dist[/\\]config\.js$/.test(args.importer) ? { path: join(dirname(args.importer), "gen/index.js"), namespace: "client-node-gen" } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: "client-node-gen" }, (args) => {
      const gen = dirname(args.path);
      return {
        loader: "js",
        contents: `export { createConfiguration } from ${JSON.stringify(join(gen, "configuration.js"))};\nexport { ServerConfiguration } from ${JSON.stringify(join(gen, "servers.js"))};\n`,
      };
    });
  },
};

/** Builds the executable at `outfile`; throws with the bundler's messages on failure. */
export async function buildBinary(outfile: string): Promise<void> {
  const res = await Bun.build({
    entrypoints: [join(ROOT, "src/main.ts")],
    compile: { outfile },
    bytecode: true,
    format: "esm",
    target: "bun",
    plugins: [clientNodeConfigOnly],
  });
  if (!res.success) throw new AggregateError(res.logs, `build failed: ${res.logs.map(String).join("\n")}`);
}

if (import.meta.main) {
  const i = process.argv.indexOf("--outfile");
  const outfile = i > 0 && process.argv[i + 1] ? process.argv[i + 1] : join(ROOT, "dist/kpng");
  await buildBinary(outfile);
  console.log(`built ${outfile}`);
}
