package server

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/agentplane/agentplane/internal/ids"
	"github.com/agentplane/agentplane/internal/store"
)

// Names of the settings that keep the demo's credentials.
const (
	settingDemoAdminKey = "demo.admin_key"
	settingDemoUserKey  = "demo.user_key"
)

// demoUser is the user the demo's chat URL logs in as.
const demoUser = "demo"

// demoCredentials are the keys `serve --demo` prints and how it got them.
type demoCredentials struct {
	adminKey    string
	adminStored bool // generated once and kept in the database
	userKey     string
	userStored  bool
}

// keepDemoCredentials gives the demo the same admin and user keys at every
// start on the same database (issue 8 item 16: new keys at each start broke
// an open chat tab and exported keys). A key the operator set wins:
// AGENTPLANE_ADMIN_KEY, or a "demo" user in AGENTPLANE_API_KEYS. Otherwise
// the key generated on the first start is stored in the settings table and
// read back later; processes starting together agree on the one stored
// first.
func keepDemoCredentials(ctx context.Context, st store.Store, adminKey string, userKeys map[string]string) (demoCredentials, error) {
	c := demoCredentials{adminKey: adminKey, userKey: userKeys[demoUser]}
	now := time.Now().UnixMilli()
	var err error
	if c.adminKey == "" {
		if c.adminKey, err = st.SettingPutIfAbsent(ctx, settingDemoAdminKey, ids.Secret("adm_"), now); err != nil {
			return c, fmt.Errorf("demo admin key: %w", err)
		}
		c.adminStored = true
	}
	if c.userKey == "" {
		if c.userKey, err = st.SettingPutIfAbsent(ctx, settingDemoUserKey, ids.Secret("usr_")[:28], now); err != nil {
			return c, fmt.Errorf("demo user key: %w", err)
		}
		c.userStored = true
	}
	return c, nil
}

// storeWhere names the database for a person reading the startup output:
// the SQLite file, or the PostgreSQL host and database (never the
// credentials in the URL).
func storeWhere(dsn string) string {
	if path, ok := strings.CutPrefix(dsn, "sqlite:"); ok {
		return path
	}
	u, err := url.Parse(dsn)
	if err != nil || u.Host == "" {
		return "the PostgreSQL database"
	}
	return "PostgreSQL database " + strings.TrimPrefix(u.Path, "/") + " on " + u.Host
}
