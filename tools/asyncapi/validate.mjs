// Reads an AsyncAPI document (file argument or stdin) and runs the official parser on it.
// Prints every diagnostic as JSON lines; exits 1 on any error or warning, 0 otherwise.
import { Parser } from '@asyncapi/parser';
import { readFileSync } from 'node:fs';

const source = process.argv[2] ? readFileSync(process.argv[2], 'utf8') : readFileSync(0, 'utf8');
const parser = new Parser();
const { document, diagnostics } = await parser.parse(source);
const severities = ['error', 'warning', 'info', 'hint'];
let bad = 0;
for (const d of diagnostics) {
  const severity = severities[d.severity] ?? String(d.severity);
  if (d.severity <= 1) bad += 1;
  console.log(JSON.stringify({ severity, code: d.code, message: d.message, path: d.path }));
}
if (!document) bad += 1;
console.log(JSON.stringify({ parsed: Boolean(document), problems: bad }));
process.exit(bad ? 1 : 0);
