import { openOpfsStore, openSharedStore, type SharedStore } from 'idemdb/browser';
const s = await openOpfsStore('a', { wait: 1000 });
const shared: SharedStore = await openSharedStore('b');
void s; void shared;
