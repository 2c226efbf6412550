package history

import (
	"time"

	"github.com/gpumon/gpumon/internal/inifile"
)

// Config is [history]: where the database is and how snapshots are read.
type Config struct {
	DB       string // "" turns history off
	Params   Params
	KeepDays int // whole snapshots are kept this many days; the hourly figures a year
}

// Defaults of [history], documented in config.example.ini.
const (
	DefaultDB       = "history.db"
	DefaultKeepDays = 14
)

// DefaultConfig is [history] when the file leaves it out.
func DefaultConfig() Config {
	return Config{DB: DefaultDB, Params: DefaultParams, KeepDays: DefaultKeepDays}
}

// ReadConfig reads [history] into c. The database's default is beside the
// config file, so that a run from cron, `render -import` and `render
// -usage` all find the same one, and the web folder never holds it.
func ReadConfig(f *inifile.File, c *Config) error {
	sec := f.Section("history")
	c.DB = f.Resolve(DefaultDB)
	if v, ok := sec.Path("db"); ok {
		c.DB = v
	}
	day := 24 * time.Hour
	if err := sec.Duration("max_gap", inifile.Limits[time.Duration]{Min: time.Second, Max: day,
		Want: "a duration from 1s to 1d (e.g. 15m)"}, &c.Params.MaxGap); err != nil {
		return err
	}
	if err := sec.Float("idle_util_pct", inifile.Limits[float64]{Min: 0, Max: 100,
		Want: "a percentage from 0 to 100"}, &c.Params.IdleUtilPct); err != nil {
		return err
	}
	if err := sec.Duration("idle_after", inifile.Limits[time.Duration]{Min: time.Minute, Max: 30 * day,
		Want: "a duration from 1m to 30d (e.g. 2h)"}, &c.Params.IdleAfter); err != nil {
		return err
	}
	return sec.Int("keep_days", inifile.Limits[int]{Min: 1, Max: 366,
		Want: "a whole number of days from 1 to 366"}, &c.KeepDays)
}

// Open opens the database c names.
func (c Config) Open() (*Store, error) {
	return Open(c.DB, c.Params, time.Duration(c.KeepDays)*24*time.Hour)
}
