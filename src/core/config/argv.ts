// Command-line parsing with pflag's rules, the ones kube-proxy's flags follow:
// `--name=value`, `--name value`, `--bool` / `--bool=false`, one-letter
// shorthands (`-v 2`, `-v=2`, `-v2`), `--` ends the flags. A single-dash long
// flag (`-hostname-override=x`) and a positional argument are errors: pflag
// would read the first as a bundle of shorthands, and kube-proxy takes no
// arguments. Definitions are citty-shaped records, so adding a flag is one line.
// Pure: argv in, values or a KpngError out; usage text is rendered here too.

import { invalid } from "../errors.ts";

export interface FlagDef {
  type: "string" | "boolean";
  /** other long names (`hostname-override`) and one-letter shorthands (`o`) */
  alias?: string | string[];
  description?: string;
  default?: string | boolean;
  valueHint?: string;
  /** pflag's NoOptDefVal: the value of a string flag given without one (`--version` = `--version=true`) */
  noOptDefVal?: string;
  /** accepted for kube-proxy compatibility but without effect in kpng: why (named in one WARN line at start-up) */
  noEffect?: string;
  /** left out of --help */
  hidden?: boolean;
}
export type FlagDefs = Record<string, FlagDef>;

export interface ParsedArgv {
  /** last value per canonical name (booleans as booleans) */
  args: Record<string, string | boolean | undefined>;
  /** every occurrence, in order, as `--canonical=value`: what `repeated()` reads */
  rawArgs: string[];
  /** canonical names given on the command line, in order of first use */
  given: string[];
  /** the arguments that are not flags, for a command that takes some (`kpng get services NS/NAME`) */
  positionals: string[];
}

export interface ParseOptions {
  /** accept arguments that are not flags (kubectl-like subcommands); kube-proxy's own command takes none */
  positionals?: boolean;
}

const aliasesOf = (def: FlagDef): readonly string[] => (typeof def.alias === "string" ? [def.alias] : (def.alias ?? []));

/** pflag's strconv.ParseBool. */
function parseBool(flag: string, value: string): boolean {
  if (["1", "t", "T", "true", "TRUE", "True"].includes(value)) return true;
  if (["0", "f", "F", "false", "FALSE", "False"].includes(value)) return false;
  throw invalid(`flag ${flag}: invalid argument "${value}" (must be true or false)`);
}

export function parseArgv(argv: readonly string[], defs: FlagDefs, opts: ParseOptions = {}): ParsedArgv {
  const long = new Map<string, string>();
  const short = new Map<string, string>();
  for (const [name, def] of Object.entries(defs)) {
    long.set(name, name);
    for (const a of aliasesOf(def)) (a.length === 1 ? short : long).set(a, name);
  }
  const out: ParsedArgv = { args: {}, rawArgs: [], given: [], positionals: [] };
  const set = (name: string, value: string | boolean) => {
    out.args[name] = value;
    out.rawArgs.push(`--${name}=${value}`);
    if (!out.given.includes(name)) out.given.push(name);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") {
      if (opts.positionals) out.positionals.push(...argv.slice(i + 1));
      else if (i + 1 < argv.length) throw positional(argv[i + 1]);
      break;
    }
    if (!a.startsWith("-") || a === "-") {
      if (!opts.positionals) throw positional(a);
      out.positionals.push(a);
      continue;
    }
    if (a.startsWith("--")) {
      const eq = a.indexOf("=");
      const given = eq < 0 ? a.slice(2) : a.slice(2, eq);
      const name = long.get(given);
      if (!name) throw invalid(`flag --${given}: unknown flag`);
      const def = defs[name];
      if (def.type === "boolean") set(name, eq < 0 ? true : parseBool(`--${given}`, a.slice(eq + 1)));
      else if (eq >= 0) set(name, a.slice(eq + 1));
      else if (def.noOptDefVal !== undefined) set(name, def.noOptDefVal);
      else if (i + 1 < argv.length) set(name, argv[++i]);
      else throw invalid(`flag --${given}: needs an argument`);
      continue;
    }
    // One dash: a shorthand, with its value attached (-v2, -v=2), following (-v 2), or none (-h).
    const body = a.slice(1);
    const longName = body.split("=")[0];
    if (longName.length > 1 && long.has(longName)) throw invalid(`flag ${a.split("=")[0]}: long flags take two dashes: --${longName}`);
    const name = short.get(body[0]);
    if (!name)
      throw invalid(
        `flag ${a.split("=")[0]}: unknown shorthand flag '${body[0]}'${longName.length > 1 ? " (long flags take two dashes)" : ""}`,
      );
    const rest = body.slice(1).replace(/^=/, "");
    if (defs[name].type === "boolean") {
      if (body.length > 1 && body[1] !== "=") throw invalid(`flag ${a}: unknown shorthand flag '${body[1]}' (long flags take two dashes)`);
      set(name, body[1] === "=" ? parseBool(`-${body[0]}`, rest) : true);
    } else if (body.length > 1) set(name, rest);
    else if (i + 1 < argv.length) set(name, argv[++i]);
    else throw invalid(`flag -${body[0]}: needs an argument`);
  }
  return out;
}

/** Throws the one-line error for an argv the definitions do not accept. */
export function checkUnknownFlags(argv: readonly string[], defs: FlagDefs): void {
  parseArgv(argv, defs);
}

const positional = (a: string) => invalid(`unexpected argument "${a}": kpng takes flags only (long flags start with --)`);

export interface UsageCommand {
  name: string;
  description: string;
}

/** pflag-style help: `  -v, --v string   text`, kpng's flags, then kube-proxy's accepted-without-effect ones. */
export function formatUsage(opts: { usage: string; description: string; commands?: readonly UsageCommand[]; defs: FlagDefs }): string {
  const line = (name: string, def: FlagDef) => {
    const shorts = aliasesOf(def).filter((x) => x.length === 1);
    const longs = [name, ...aliasesOf(def).filter((x) => x.length > 1)];
    const head = `${shorts.length ? `-${shorts[0]}, ` : "    "}${longs.map((l) => `--${l}`).join(", ")}${def.type === "string" ? ` ${def.valueHint ?? "string"}` : ""}`;
    return { head, text: def.noEffect ? `no effect in kpng: ${def.noEffect}` : (def.description ?? "") };
  };
  const visible = Object.entries(opts.defs).filter(([, d]) => !d.hidden);
  const own = visible.filter(([, d]) => !d.noEffect).map(([n, d]) => line(n, d));
  const none = visible.filter(([, d]) => d.noEffect).map(([n, d]) => line(n, d));
  const width = Math.min(48, Math.max(...[...own, ...none].map((l) => l.head.length)) + 3);
  const block = (ls: Array<{ head: string; text: string }>) =>
    ls.map((l) => `  ${l.head.padEnd(width)}${l.head.length >= width ? " " : ""}${l.text}`).join("\n");
  const parts = [opts.description, "", "Usage:", ...opts.usage.split("\n").map((u) => `  ${u}`)];
  if (opts.commands?.length) {
    const w = Math.max(...opts.commands.map((c) => c.name.length)) + 3;
    parts.push("", "Commands:", ...opts.commands.map((c) => `  ${c.name.padEnd(w)}${c.description}`));
  }
  parts.push("", "Flags:", block(own));
  if (none.length) parts.push("", "kube-proxy flags accepted for compatibility (named in one warning at start-up):", block(none));
  return parts.join("\n") + "\n";
}
