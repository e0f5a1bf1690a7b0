// The README's examples, extracted from the README shipped in the installed tarball.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** The fenced block whose first line is `firstLine`. */
export function readmeBlock(project, firstLine) {
  const readme = readFileSync(join(project, 'node_modules', 'idemdb', 'README.md'), 'utf8');
  const blocks = [...readme.matchAll(/```[a-z]*\n([\s\S]*?)```/g)].map((m) => m[1]);
  const block = blocks.find((b) => b.startsWith(firstLine));
  if (!block) throw new Error(`README has no block starting with ${firstLine}`);
  return block;
}
