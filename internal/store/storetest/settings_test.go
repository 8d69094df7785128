package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/internal/store"
	"github.com/agentplane/agentplane/internal/testdb"
)

// Settings are written once and read back by every later start (the demo's
// credentials, issue 8 item 16).
func TestSettings(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		if _, err := s.SettingGet(ctx, "demo.admin_key"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("unset setting: %v, want ErrNotFound", err)
		}
		got, err := s.SettingPutIfAbsent(ctx, "demo.admin_key", "adm_first", 1)
		if err != nil || got != "adm_first" {
			t.Fatalf("first put = %q, %v", got, err)
		}
		// A later start keeps what the first one stored.
		got, err = s.SettingPutIfAbsent(ctx, "demo.admin_key", "adm_second", 2)
		if err != nil || got != "adm_first" {
			t.Fatalf("second put = %q, %v; want the first value kept", got, err)
		}
		if got, err := s.SettingGet(ctx, "demo.admin_key"); err != nil || got != "adm_first" {
			t.Fatalf("get = %q, %v", got, err)
		}
		// Inside a transaction too.
		err = s.InTx(ctx, func(tx store.Queries) error {
			v, err := tx.SettingPutIfAbsent(ctx, "other", "x", 3)
			if err != nil || v != "x" {
				return fmt.Errorf("put in tx = %q, %w", v, err)
			}
			v, err = tx.SettingGet(ctx, "other")
			if err != nil || v != "x" {
				return fmt.Errorf("get in tx = %q, %w", v, err)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		// Any text is kept as given.
		odd := "ünïcode 'quoted' \"double\" \\ back\nline"
		if got, err := s.SettingPutIfAbsent(ctx, "odd", odd, 4); err != nil || got != odd {
			t.Fatalf("odd value = %q, %v", got, err)
		}
	})
}

// Processes starting together (replicas on one PostgreSQL) agree on one value.
func TestSettingPutIfAbsentRace(t *testing.T) {
	testdb.Each(t, func(t *testing.T, dialect string) {
		s := testdb.Open(t, dialect)
		ctx := context.Background()
		const n = 8
		got := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = s.SettingPutIfAbsent(ctx, "race", fmt.Sprintf("v%d", i), int64(i))
			}()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("put %d: %v", i, errs[i])
			}
			if got[i] != got[0] {
				t.Fatalf("starters disagree: %q", got)
			}
		}
	})
}
