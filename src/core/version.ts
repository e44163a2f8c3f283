// kpng's version.Info, field for field as kube-proxy's
// (k8s.io/component-base/version.Info), with the JavaScript runtime in the
// place of goVersion. build.ts stamps the commit, the tree state and the
// build date into a compiled binary (a `define` of KPNG_BUILD); run from
// source, kpng says it is unstamped, as an unstamped Go build does.

import pkg from "../../package.json" with { type: "json" };

/** build.ts's stamp; an undeclared global (typeof "undefined") when run from source */
declare const KPNG_BUILD: { gitCommit: string; gitTreeState: string; buildDate: string };

export interface VersionInfo {
  major: string;
  minor: string;
  gitVersion: string;
  gitCommit: string;
  gitTreeState: string;
  buildDate: string;
  /** goVersion's place: the runtime that runs kpng */
  runtime: string;
  compiler: string;
  platform: string;
}

/** Go's names for the platform (runtime.GOOS/GOARCH), as kube-proxy reports it. */
const GOOS: Record<string, string> = { win32: "windows" };
const GOARCH: Record<string, string> = { x64: "amd64", ia32: "386", arm64: "arm64", arm: "arm", ppc64: "ppc64le", s390x: "s390x" };

export function versionInfo(): VersionInfo {
  const stamp =
    typeof KPNG_BUILD === "undefined" ? { gitCommit: "unknown", gitTreeState: "unknown", buildDate: "1970-01-01T00:00:00Z" } : KPNG_BUILD;
  const [major = "", minor = ""] = pkg.version.split(".");
  return {
    major,
    minor,
    gitVersion: `v${pkg.version}`,
    ...stamp,
    runtime: `bun${Bun.version}`,
    compiler: "bun",
    platform: `${GOOS[process.platform] ?? process.platform}/${GOARCH[process.arch] ?? process.arch}`,
  };
}
