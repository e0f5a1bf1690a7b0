// Page side of the browser tests: starts dedicated workers (where OPFS sync handles live) and
// forwards calls to them. The test driver calls `window.call(workerId, command, args)`.
const workers = new Map();

window.spawn = (id) => {
  const worker = new Worker(new URL('./worker.js', import.meta.url), { type: 'module' });
  const entry = { worker, seq: 0, pending: new Map(), events: [] };
  worker.onmessage = ({ data }) => {
    if (data.event) return entry.events.push(data);
    const waiter = entry.pending.get(data.id);
    entry.pending.delete(data.id);
    if (data.ok) waiter.resolve(data.value);
    else waiter.reject(Object.assign(new Error(data.error.message), data.error));
  };
  workers.set(id, entry);
  return true;
};

window.call = (id, command, args = {}) => {
  const entry = workers.get(id);
  const callId = ++entry.seq;
  return new Promise((resolve, reject) => {
    entry.pending.set(callId, { resolve, reject });
    entry.worker.postMessage({ id: callId, command, args });
  }).catch((error) => ({ error: { name: error.name, code: error.code, message: error.message, waitedMs: error.waitedMs } }));
};

window.events = (id) => workers.get(id).events;

window.kill = (id) => {
  workers.get(id).worker.terminate();
  workers.delete(id);
  return true;
};

window.ready = true;
