// Package configini is the layout of config.ini, the one file fetch and
// render share: which sections it has and which keys each may hold. Each
// command reads its own sections (package fetch reads [common], package
// render the rest) but checks the whole file against this layout, so a
// typo in any section is an error for both commands, and neither command
// has to import the other.
package configini

import (
	"github.com/gpumon/gpumon/internal/health"
	"github.com/gpumon/gpumon/internal/inifile"
)

// DefaultOutput is where fetch writes its CSV, and so where render reads it.
const DefaultOutput = "load_data.csv"

// CommonKeys are fetch's settings; render reads output too.
var CommonKeys = []string{
	"user", "hosts", "hosts_file", "hosts_command", "key_filename",
	"ssh_config", "known_hosts", "strict_host_key_checking",
	"timeout", "concurrency", "output", "idlemon_state", "containers",
	"process_util", "kernel_log", "poll_interval",
}

// RenderKeys are the keys of [render].
var RenderKeys = []string{
	"title", "input", "html", "json", "prom", "stale_after", "free_memory_mib",
	"ignore_processes", "refresh", "reservations", "prom_detail",
	"text", "free_text", "commands", "users", "pseudonym_key",
}

// HistoryKeys are the keys of [history] (render's history database).
var HistoryKeys = []string{"db", "max_gap", "idle_util_pct", "idle_after", "keep_days"}

// NotifyKeys are the keys of [notify] (render's notifications).
var NotifyKeys = []string{
	"webhook", "mail_to", "mail_users", "mail_from", "sendmail",
	"host_down_after", "remind_after", "commands", "page_url",
	"events", "degraded_after", "unreserved_after",
}

// AccountingKeys are the keys of [accounting] (render's reports; package
// accounting reads them).
var AccountingKeys = []string{"currency", "kwh_price", "co2_g_per_kwh", "low_efficiency_pct"}

// Layout is config.ini's layout. [host_names], [gpu_names], [groups],
// [gpu_hour_prices], [teams] and [team_leads] take any key: their keys are
// host, GPU, group, model and team names, not settings.
var Layout = inifile.Layout{
	Sections: []inifile.SectionRule{
		{Name: "common", Keys: CommonKeys},
		{Name: "render", Keys: RenderKeys},
		{Name: "history", Keys: HistoryKeys},
		{Name: "notify", Keys: NotifyKeys},
		{Name: "health", Keys: health.ConfigKeys},
		{Name: "host_names", AnyKey: true},
		{Name: "gpu_names", AnyKey: true},
		{Name: "groups", AnyKey: true},
		{Name: "accounting", Keys: AccountingKeys},
		{Name: "gpu_hour_prices", AnyKey: true},
		{Name: "teams", AnyKey: true},
		{Name: "team_leads", AnyKey: true},
	},
	Home: "common",
}
