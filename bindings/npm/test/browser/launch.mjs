// Launches Debian's Chromium headless through playwright-core, with a persistent profile
// (so a "browser restart" keeps its OPFS), serving the scratch project (where the packed
// tarball is installed) and the test pages from a local server.
import { cpSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { chromium } from 'playwright-core';

import { startServer } from '../server.mjs';

const here = dirname(fileURLToPath(import.meta.url));
export const project = process.env.IDEMDB_SCRATCH ?? join(here, '..', '..', '.scratch', 'project');
export const executablePath = process.env.IDEMDB_CHROMIUM ?? '/usr/bin/chromium';

const FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

export async function startSite() {
  cpSync(here, join(project, 'browser'), { recursive: true });
  return startServer({ staticRoot: project });
}

export function newProfile() {
  return mkdtempSync(join(tmpdir(), 'idemdb-chromium-'));
}

export async function launch(profile) {
  return chromium.launchPersistentContext(profile, { executablePath, headless: true, args: FLAGS });
}

/** Opens the test page and waits for its helpers. */
export async function openPage(context, site) {
  const page = await context.newPage();
  page.on('pageerror', (error) => console.error('page error:', error));
  await page.goto(`${site.url}/browser/page.html`);
  await page.waitForFunction(() => window.ready === true);
  return page;
}

/** Calls a worker command; throws if the worker answered with an error. */
export async function call(page, worker, command, args = {}) {
  const value = await page.evaluate(([w, c, a]) => window.call(w, c, a), [worker, command, args]);
  return value;
}
