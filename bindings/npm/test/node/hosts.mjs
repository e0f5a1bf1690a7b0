// Host storage for the Node tests: the store file as one growable array in memory, with a
// count of durable flushes.
export function memoryHost() {
  let bytes = new Uint8Array(0);
  const host = {
    flushes: 0,
    read: (offset, out) => out.set(bytes.subarray(offset, offset + out.length)),
    write: (offset, data) => bytes.set(data, offset),
    size: () => bytes.length,
    truncate: (length) => {
      const next = new Uint8Array(length);
      next.set(bytes.subarray(0, Math.min(length, bytes.length)));
      bytes = next;
    },
    flush: () => {
      host.flushes += 1;
    },
  };
  return host;
}
