// The decisions loadConfig takes once the file and the flags are read: when
// kube-proxy's minimum sync period holds, which flag-set values earn a
// warning, and the apiVersion --write-config-to writes.

import { describe, expect, test } from "bun:test";
import { kubeProxyArgs } from "../../src/core/config/kube-proxy-flags.ts";
import { flagFieldWarnings, minSyncPeriodAsked, writeConfigVersion } from "../../src/core/config/load-config.ts";
import { kubeProxyDefaults, V1ALPHA1, V1ALPHA2 } from "../../src/core/config/kube-proxy-config.ts";

describe("minSyncPeriodAsked", () => {
  const cases: Array<{ name: string; given: string[]; inFile: boolean; ipvs?: boolean; want: boolean }> = [
    { name: "no file, no flag: syncs paced by their cost", given: ["backend", "sync-period"], inFile: false, want: false },
    { name: "the file sets minSyncPeriod", given: [], inFile: true, want: true },
    { name: "--min-sync-period", given: ["min-sync-period"], inFile: false, want: true },
    { name: "--iptables-min-sync-period", given: ["iptables-min-sync-period"], inFile: false, want: true },
    { name: "--ipvs-min-sync-period in ipvs mode", given: ["ipvs-min-sync-period"], inFile: false, ipvs: true, want: true },
    { name: "--ipvs-min-sync-period outside ipvs mode: not this mode's", given: ["ipvs-min-sync-period"], inFile: false, want: false },
    {
      name: "--iptables-min-sync-period in ipvs mode: not this mode's",
      given: ["iptables-min-sync-period"],
      inFile: false,
      ipvs: true,
      want: false,
    },
  ];
  for (const c of cases) test(c.name, () => expect(minSyncPeriodAsked(c.given, c.inFile, c.ipvs ?? false)).toBe(c.want));
});

describe("flagFieldWarnings", () => {
  const profiling = { ...kubeProxyDefaults(), enableProfiling: true };
  // Every kube-proxy flag whose field kpng cannot honour is itself noEffect today: a flag made honoured to see the rule.
  const defs = { ...kubeProxyArgs, profiling: { type: "boolean" as const } };
  const warning = "enableProfiling: true has no effect in kpng: no /debug/pprof (a Go runtime feature)";

  test("a value set by a flag that kpng cannot honour: one line, marked as set by a flag", () => {
    expect(flagFieldWarnings({ given: ["profiling"], defs, doc: profiling, fileWarnings: [] })).toEqual([`${warning} (set by a flag)`]);
  });
  test("the same value from the file alone: the file's own warning says it, not this", () => {
    expect(flagFieldWarnings({ given: [], defs: kubeProxyArgs, doc: profiling, fileWarnings: [] })).toEqual([]);
  });
  test("the flag repeats what the file said: warned once, by the file", () => {
    expect(flagFieldWarnings({ given: ["profiling"], defs, doc: profiling, fileWarnings: [`config.yaml: ${warning}`] })).toEqual([]);
  });
  test("a flag with no effect at all is not a field warning (it has its own WARN line)", () => {
    expect(flagFieldWarnings({ given: ["profiling"], defs: kubeProxyArgs, doc: profiling, fileWarnings: [] })).toEqual([]);
  });
});

describe("writeConfigVersion", () => {
  test("not asked: the --config file's own apiVersion", () => {
    expect(writeConfigVersion(undefined, V1ALPHA2)).toBe(V1ALPHA2);
    expect(writeConfigVersion(undefined, V1ALPHA1)).toBe(V1ALPHA1);
  });
  test("a short name or the full apiVersion", () => {
    expect(writeConfigVersion("v1alpha2", V1ALPHA1)).toBe(V1ALPHA2);
    expect(writeConfigVersion(V1ALPHA1, V1ALPHA2)).toBe(V1ALPHA1);
  });
  test("anything else: a one-line error naming the flag", () => {
    expect(() => writeConfigVersion("v1beta1", V1ALPHA1)).toThrow('flag --write-config-version: "v1beta1" must be v1alpha1 or v1alpha2');
  });
});
