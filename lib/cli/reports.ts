/**
 * The report flags that bench and bench-files share (--json, --csv, --out, --html, --junit,
 * --prometheus): each declared once, and what they ask for printed and written the same way.
 */
import { Command, Option } from 'commander';
import { writeTextfile } from '../metrics/exposition';
import type { MetricFamily } from '../metrics/exposition';
import type { Gate } from '../bench/gates';
import { writeOutput } from './common';
import { outFile } from './options';

/** What the report flags hand a command's action, with its repeatable --expect gates. */
export interface ReportFlags {
  json?: boolean;
  csv?: boolean;
  out?: string;
  html?: string;
  junit?: string;
  prometheus?: string;
  expect?: Gate[];
}

/**
 * Adds the report flags to `command`: `json` is --json's help, `afterCsv` options (bench's
 * --chart) come between --csv and the files.
 */
export function addReportOptions(command: Command, json: string, afterCsv: Option[] = []): Command {
  command.addOption(new Option('--json', json).conflicts('csv')).option('--csv', 'CSV on stdout instead of the table');
  for (const o of afterCsv) command.addOption(o);
  return command
    .option('--out <file>', 'also write the JSON report here', outFile)
    .option('--html <file>', 'a self-contained HTML report with SVG charts', outFile)
    .option('--junit <file>', 'JUnit XML, one testcase per result and gate', outFile)
    .option('--prometheus <file>', "the results in node_exporter's textfile format (name it *.prom)", outFile);
}

/** The report on stdout: `json` (the report as JSON) with --json, the CSV with --csv, else the table. */
export function printReport(o: ReportFlags, json: string, csv: () => string, table: () => string): void {
  if (o.json) process.stdout.write(json + '\n');
  else if (o.csv) process.stdout.write(csv());
  else process.stdout.write(table());
}

/** The files of a report, each made only when its flag asks for it. */
export interface ReportFiles {
  html: () => string;
  junit: () => string;
  families: () => MetricFamily[];
}

/** Writes the files the flags name: --out the JSON report, then --html, --junit and --prometheus. */
export function writeReportFiles(o: ReportFlags, json: string, files: ReportFiles): void {
  if (o.out) writeOutput(o.out, json + '\n');
  if (o.html) writeOutput(o.html, files.html());
  if (o.junit) writeOutput(o.junit, files.junit());
  if (o.prometheus) writeOutput(o.prometheus, (f) => writeTextfile(f, files.families()));
}
