// Reading Prometheus text exposition in tests: one series' value, a family's
// type, a histogram's bucket boundaries.

/** The value of one series (name and labels exactly as printed), or undefined. */
export function value(text: string, series: string): number | undefined {
  const line = text.split("\n").find((l) => l.startsWith(series + " "));
  return line === undefined ? undefined : Number(line.slice(series.length + 1));
}

/** The `# TYPE` of a family, or undefined. */
export function typeOf(text: string, name: string): string | undefined {
  return text.match(new RegExp(`^# TYPE ${name} (\\w+)$`, "m"))?.[1];
}

/** The finite `le` boundaries of a histogram's first series, in order. */
export function bucketsOf(text: string, name: string): number[] {
  const les: number[] = [];
  const seen = new Set<string>();
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}_bucket{`)) continue;
    const le = line.match(/le="([^"]+)"/)?.[1];
    const rest = line.replace(/le="[^"]+",?/, "");
    const series = rest.slice(0, rest.indexOf("}"));
    if (seen.size && !seen.has(series)) break;
    seen.add(series);
    if (le && le !== "+Inf") les.push(Number(le));
  }
  return les;
}
