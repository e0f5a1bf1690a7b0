// TypeScript 5.9 with explicit resource management: a store in a `using` declaration is closed
// when its block ends; intent pages and their async iteration are typed.
import { openMemoryStore, type Intent, type IntentPage, type IntentState, type Store } from 'idemdb';

{
  using store = await openMemoryStore();
  const kept: Store = store;
  kept.createIntent({ tenant: 'a', operation: 'b' }, { amount: 1 });
  const page: IntentPage = store.intentPage({ limit: 10, state: 'pending' });
  const next: string | null = page.next;
  const more: IntentPage = store.intentPage({ after: next, limit: 10 });
  for await (const intent of store.intents({ state: 'needs_attention', pageSize: 50 })) {
    const found: Intent = intent;
    void found;
  }
  const state: IntentState = 'completed';
  void more; void state;
  // @ts-expect-error not an intent state
  store.intentPage({ state: 'done' });
  // @ts-expect-error the cursor is a string
  store.intentPage({ after: 3 });
}
