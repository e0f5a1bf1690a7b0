// Runs workerd (npm `workerd`) on a worker that imports `idemdb` from the installed tarball:
// writes the capnp config into the scratch project (embeds are relative to it), hands workerd a
// listening socket on a port the kernel picked, and waits until it answers. Used by the workerd
// tests and the Durable Object benchmark.
import { spawn } from 'node:child_process';
import { readdirSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
export const project = process.env.IDEMDB_SCRATCH ?? join(here, '..', '..', '.scratch', 'project');
const pkgRoot = join(project, 'node_modules', 'idemdb');
const workerdBin = join(here, '..', '..', 'node_modules', '.bin', 'workerd');

/** Modules of the package a worker needs (the Node and browser entries are left out). */
const SKIP = new Set(['node.js', 'node-file.js', 'browser.js', 'opfs.js', 'shared.js']);

/** The package's modules, each by its path under node_modules, and `idemdb` as an alias of the workerd entry. */
export function packageModules(idemdbSource = "export * from './node_modules/idemdb/dist/esm/workerd.js';") {
  const modules = [`(name = "idemdb", esModule = ${JSON.stringify(idemdbSource)})`];
  for (const sub of ['dist/esm', 'dist/esm/generated', 'dist/wasm']) {
    for (const file of readdirSync(join(pkgRoot, sub))) {
      if (SKIP.has(file)) continue;
      const name = `node_modules/idemdb/${sub}/${file}`;
      if (file.endsWith('.js')) modules.push(`(name = ${JSON.stringify(name)}, esModule = embed ${JSON.stringify(name)})`);
      if (file.endsWith('.wasm')) modules.push(`(name = ${JSON.stringify(name)}, wasm = embed ${JSON.stringify(name)})`);
    }
  }
  return modules;
}

/**
 * A capnp config serving `workerFile` (relative to the project) on the socket `http`. With
 * `durable: { className, binding, dir }` the worker gets a SQLite-backed Durable Object
 * namespace stored on local disk in `dir`.
 */
export function workerdConfig(workerFile, { durable, modules = packageModules(), extraModules = [] } = {}) {
  const all = [`(name = "worker.js", esModule = embed ${JSON.stringify(workerFile)})`, ...extraModules, ...modules];
  const services = ['(name = "main", worker = .worker)'];
  let objects = '';
  if (durable) {
    services.push(`(name = "do-disk", disk = (path = ${JSON.stringify(durable.dir)}, writable = true))`);
    objects = `
  durableObjectNamespaces = [(className = ${JSON.stringify(durable.className)}, uniqueKey = "idemdb-test-${durable.className}", enableSql = ${durable.sql === false ? 'false' : 'true'})],
  durableObjectStorage = (localDisk = "do-disk"),
  bindings = [(name = ${JSON.stringify(durable.binding)}, durableObjectNamespace = ${JSON.stringify(durable.className)})],`;
  }
  return `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [${services.join(', ')}],
  sockets = [(name = "http", address = "127.0.0.1:8787", http = (), service = "main")],
);
const worker :Workerd.Worker = (
  modules = [
    ${all.join(',\n    ')}
  ],
  compatibilityDate = "2025-09-01",${objects}
);
`;
}

/** Writes `text` as a config file in the project; returns its path. */
export function writeConfig(name, text) {
  const path = join(project, name);
  writeFileSync(path, text);
  return path;
}

// A listening socket on a port the kernel picks. workerd inherits it (`--socket-fd`), so no
// other process can take the port between choosing it and workerd listening on it.
async function listeningSocket() {
  const server = createServer();
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: server.address().port, fd: server._handle.fd };
}

/**
 * Starts workerd on `config` (its socket `http` replaced by an inherited one) and waits until
 * `probe` (a path) answers. Returns `{ proc, base, probeStatus, logs(), stop() }`.
 */
export async function serveWorkerd(config, { probe = '/', timeoutMs = 30_000 } = {}) {
  const socket = await listeningSocket();
  const proc = spawn(workerdBin, ['serve', '--experimental', config, '--socket-fd', 'http=3'], {
    cwd: project,
    stdio: ['ignore', 'pipe', 'pipe', socket.fd],
  });
  // The child holds its own copy; the parent must not accept connections on it.
  await new Promise((resolve) => socket.server.close(resolve));
  let out = '';
  proc.stdout.on('data', (d) => (out += d));
  proc.stderr.on('data', (d) => (out += d));
  const base = `http://127.0.0.1:${socket.port}`;
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
    await exited;
  };
  const deadline = Date.now() + timeoutMs;
  let probeStatus;
  for (;;) {
    try {
      const response = await fetch(base + probe);
      probeStatus = response.status;
      await response.arrayBuffer();
      break;
    } catch {
      if (Date.now() > deadline || proc.exitCode !== null) {
        await stop();
        throw new Error(`workerd did not start:\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { proc, base, probeStatus, logs: () => out, stop };
}
