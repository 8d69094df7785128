package sqlstore

import "sync"

// texts caches statement texts made from a key (a dialect, a row count):
// a text that depends only on its key is built once, not on every call —
// multi-row statements on the append path would otherwise build theirs on
// every commit.
type texts[K comparable] struct{ m sync.Map }

// get is k's text, made by build the first time.
func (t *texts[K]) get(k K, build func(K) string) string {
	if s, ok := t.m.Load(k); ok {
		return s.(string)
	}
	s, _ := t.m.LoadOrStore(k, build(k))
	return s.(string)
}
