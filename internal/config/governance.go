package config

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"
)

// Limits is the config file's limits: section (DESIGN §15). Every limit is
// off (0) unless set; the file's max_ws_per_user is used only when neither
// AGENTPLANE_MAX_WS_PER_USER nor --max-ws-per-user is given.
type Limits struct {
	// UserRequestsPerSecond and UserBurst are the token bucket of each user
	// key: HTTP requests made with it and WebSocket commands of its
	// connections. Burst defaults to max(1, requests per second).
	UserRequestsPerSecond float64 `yaml:"user_requests_per_second"`
	UserBurst             int     `yaml:"user_burst"`
	// AgentRequestsPerSecond and AgentBurst are the same per agent key: every
	// HTTP request made with it (LLM proxy, tools, transcript, context…).
	AgentRequestsPerSecond float64 `yaml:"agent_requests_per_second"`
	AgentBurst             int     `yaml:"agent_burst"`
	// MaxActiveRunsPerUser bounds one user's active root runs across every
	// session and replica (1 = seed 003's per-user mutual exclusion); a
	// start over it is refused 429 user_busy.
	MaxActiveRunsPerUser int `yaml:"max_active_runs_per_user"`
	// MaxActiveRuns bounds the active root runs of the whole platform; a
	// start over it waits QUEUED, first in first out.
	MaxActiveRuns int `yaml:"max_active_runs"`
	// MaxWSPerUser is AGENTPLANE_MAX_WS_PER_USER from the file (nil: not
	// set there).
	MaxWSPerUser *int `yaml:"max_ws_per_user"`
	// AgentKeyGraceSeconds keeps an agent's previous key valid this long
	// after rotate_key issues a new one.
	AgentKeyGraceSeconds int `yaml:"agent_key_grace_seconds"`
}

// Retention is the config file's retention: section (DESIGN §15).
type Retention struct {
	// Days: sessions whose runs have all ended and whose last activity is
	// older are deleted by the sweeper. 0 keeps them forever; at most
	// MaxRetentionDays.
	Days int `yaml:"days"`
	// Agents overrides Days for sessions with runs of these agents (a
	// session with several agents is kept as long as the longest of them),
	// 1 to MaxRetentionDays.
	Agents map[string]int `yaml:"agents"`
	// SweepInterval is how often the sweeper looks (default 1m).
	SweepInterval time.Duration `yaml:"sweep_interval"`
	// BatchSize is the rows one delete statement removes (default 500).
	BatchSize int `yaml:"batch_size"`
}

// Enabled reports whether any retention period is configured.
func (r *Retention) Enabled() bool { return r.Days > 0 || len(r.Agents) > 0 }

// Defaults filled in when the section leaves them out.
const (
	DefaultRetentionSweep = time.Minute
	DefaultRetentionBatch = 500
)

// MaxRetentionDays bounds retention.days and its per-agent overrides: 100
// years, to keep longer than which is to keep forever (days: 0). A larger
// value is refused rather than capped, so the file says what is done.
// Without a bound, 106,752 days and more overflowed the sweeper's
// time.Duration into a cutoff in the future, and every ended session was
// deleted (found by an external audit).
const MaxRetentionDays = 36500

// maxDefaultBurst bounds a burst derived from a rate, which int() of a huge
// float would wrap.
const maxDefaultBurst = math.MaxInt32

var retentionAgentPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$`)

// check validates the governance sections and fills in their defaults.
func (f *File) checkGovernance() error {
	var errs []error
	l := &f.Limits
	for _, r := range []struct {
		key   string
		rate  float64
		burst int
	}{{"user", l.UserRequestsPerSecond, l.UserBurst}, {"agent", l.AgentRequestsPerSecond, l.AgentBurst}} {
		// !(rate >= 0): NaN compares false to everything and would pass
		// a "< 0" check as a limit switched off (checkNumbers names it in
		// the file; a value from elsewhere is refused here).
		if !(r.rate >= 0) || math.IsInf(r.rate, 0) {
			errs = append(errs, fmt.Errorf("limits: %s_requests_per_second must not be negative and must be finite (0 means off), got %v", r.key, r.rate))
		}
		if r.burst < 0 {
			errs = append(errs, fmt.Errorf("limits: %s_burst must not be negative, got %d", r.key, r.burst))
		}
	}
	if l.UserBurst > 0 && l.UserRequestsPerSecond == 0 {
		errs = append(errs, errors.New("limits: user_burst needs user_requests_per_second"))
	}
	if l.AgentBurst > 0 && l.AgentRequestsPerSecond == 0 {
		errs = append(errs, errors.New("limits: agent_burst needs agent_requests_per_second"))
	}
	if l.UserRequestsPerSecond > 0 && l.UserBurst == 0 {
		l.UserBurst = defaultBurst(l.UserRequestsPerSecond)
	}
	if l.AgentRequestsPerSecond > 0 && l.AgentBurst == 0 {
		l.AgentBurst = defaultBurst(l.AgentRequestsPerSecond)
	}
	if l.MaxActiveRunsPerUser < 0 || l.MaxActiveRuns < 0 {
		errs = append(errs, errors.New("limits: max_active_runs_per_user and max_active_runs must not be negative (0 means no cap)"))
	}
	if l.MaxWSPerUser != nil && *l.MaxWSPerUser < 0 {
		errs = append(errs, errors.New("limits: max_ws_per_user must not be negative (0 means no cap)"))
	}
	if l.AgentKeyGraceSeconds < 0 || l.AgentKeyGraceSeconds > 30*24*3600 {
		errs = append(errs, errors.New("limits: agent_key_grace_seconds must be between 0 and 2592000 (30 days)"))
	}
	r := &f.Retention
	if r.Days < 0 || r.Days > MaxRetentionDays {
		errs = append(errs, fmt.Errorf("retention: days must not be negative (0 keeps sessions forever) nor more than %d (100 years), got %d", MaxRetentionDays, r.Days))
	}
	for id, d := range r.Agents {
		if !retentionAgentPattern.MatchString(id) {
			errs = append(errs, fmt.Errorf("retention: agents: %q is not an agent id", id))
		}
		if d < 1 || d > MaxRetentionDays {
			errs = append(errs, fmt.Errorf("retention: agents: %s: days must be at least 1 and at most %d (100 years), got %d", id, MaxRetentionDays, d))
		}
	}
	if r.SweepInterval < 0 || (r.SweepInterval > 0 && r.SweepInterval < time.Second) {
		errs = append(errs, errors.New("retention: sweep_interval must be at least 1s"))
	}
	if r.SweepInterval == 0 {
		r.SweepInterval = DefaultRetentionSweep
	}
	if r.BatchSize < 0 || r.BatchSize > 10000 {
		errs = append(errs, errors.New("retention: batch_size must be between 1 and 10000"))
	}
	if r.BatchSize == 0 {
		r.BatchSize = DefaultRetentionBatch
	}
	return errors.Join(errs...)
}

// defaultBurst is the burst of a rate set without one: max(1, rate).
func defaultBurst(rate float64) int {
	return int(max(1, min(rate, maxDefaultBurst)))
}
