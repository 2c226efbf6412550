package ignore_test

import (
	"slices"
	"strings"
	"testing"

	idleconfig "github.com/gpumon/gpumon/internal/idlemon/config"
	"github.com/gpumon/gpumon/internal/ignore"
	"github.com/gpumon/gpumon/internal/render"
)

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		name     string
		p        ignore.Process
		programs []string // nil: Default
		want     bool
	}{
		{"Xorg by its executable", ignore.Process{Exe: "/usr/lib/xorg/Xorg"}, nil, true},
		{"Xorg by argv[0]'s base name", ignore.Process{Args: "/usr/lib/xorg/Xorg vt1 -displayfd 3 -auth /run/user/1000/gdm/Xauthority"}, nil, true},
		{"Xorg by comm", ignore.Process{Comm: "Xorg"}, nil, true},
		{"Xorg, all three", ignore.Process{Comm: "Xorg", Exe: "/usr/lib/xorg/Xorg", Args: "/usr/lib/xorg/Xorg :0"}, nil, true},
		{"Xwayland", ignore.Process{Args: "/usr/bin/Xwayland :0 -rootless"}, nil, true},
		{"15-byte comm of nvidia-persistenced", ignore.Process{Comm: "nvidia-persiste"}, nil, true},
		{"whole comm", ignore.Process{Comm: "nv-hostengine"}, nil, true},
		{"nvidia-persistenced by its command line", ignore.Process{Args: "/usr/bin/nvidia-persistenced --user nvidia-persistenced"}, nil, true},
		{"dcgm-exporter by its executable", ignore.Process{Exe: "/usr/bin/dcgm-exporter"}, nil, true},
		{"nvidia-smi with arguments", ignore.Process{Args: "nvidia-smi --query-gpu=index --format=csv"}, nil, true},
		{"deleted executable already trimmed", ignore.Process{Comm: "x", Exe: "/opt/nvidia/nv-hostengine"}, nil, true},
		{"first word itself", ignore.Process{Args: "/opt/bin/viz --port 1"}, []string{"/opt/bin/viz"}, true},
		{"whole command line", ignore.Process{Args: "python3 /srv/monitor.py"}, []string{"python3 /srv/monitor.py"}, true},
		{"tab after the first word", ignore.Process{Args: "Xorg\t:0"}, nil, true},
		{"program added to the defaults", ignore.Process{Comm: "gnome-shell"}, ignore.With("gnome-shell"), true},

		{"name inside a script's name", ignore.Process{Args: "python Xorg.py"}, nil, false},
		{"name as a later argument", ignore.Process{Args: "sh -c nvidia-smi"}, nil, false},
		{"name as a later argument, with comm and exe", ignore.Process{Comm: "sh", Exe: "/usr/bin/dash", Args: "sh -c nvidia-smi"}, nil, false},
		{"name as a substring of the program", ignore.Process{Comm: "my-Xorg-test", Exe: "/opt/my-Xorg-test", Args: "/opt/my-Xorg-test"}, nil, false},
		{"program that begins with an ignored name", ignore.Process{Args: "nvidia-smi-wrapper"}, nil, false},
		{"folder named like an ignored program", ignore.Process{Exe: "/opt/Xorg/bin/python3", Args: "/opt/Xorg/bin/python3 train.py"}, nil, false},
		{"short comm is not a prefix", ignore.Process{Comm: "nvidia"}, nil, false},
		{"15-byte comm that is not a prefix", ignore.Process{Comm: "nvidia-persistx"}, nil, false},
		{"a 14-byte prefix is not the kernel's cut", ignore.Process{Comm: "nvidia-persist"}, nil, false},
		{"python", ignore.Process{Comm: "python3", Exe: "/usr/bin/python3.12", Args: "python3 train.py --gpus 0"}, nil, false},
		{"case matters", ignore.Process{Args: "xorg"}, nil, false},
		{"empty process", ignore.Process{}, nil, false},
		{"empty process, empty program", ignore.Process{}, []string{""}, false},
		{"empty program does not match", ignore.Process{Comm: "x", Exe: "/x", Args: "x"}, []string{""}, false},
		{"no programs", ignore.Process{Comm: "Xorg", Exe: "/usr/lib/xorg/Xorg", Args: "Xorg"}, []string{}, false},
		{"command line of spaces", ignore.Process{Args: "   "}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			programs := tc.programs
			if programs == nil {
				programs = ignore.Default
			}
			if got := ignore.Match(tc.p, programs); got != tc.want {
				t.Errorf("Match(%+v, %q) = %v, want %v", tc.p, programs, got, tc.want)
			}
		})
	}
}

func TestWith(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		want  []string
	}{
		{"nothing", nil, ignore.Default},
		{"new names in order", []string{"gnome-shell", "kwin_wayland"}, append(slices.Clone(ignore.Default), "gnome-shell", "kwin_wayland")},
		{"a default is not repeated", []string{"Xorg", "gnome-shell", "nvidia-smi"}, append(slices.Clone(ignore.Default), "gnome-shell")},
		{"a name given twice once", []string{"a", "a", "", "b"}, append(slices.Clone(ignore.Default), "a", "b")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ignore.With(tc.extra...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("With(%q) = %q, want %q", tc.extra, got, tc.want)
			}
		})
	}
	// a fresh slice each time: appending to it leaves Default alone
	before := slices.Clone(ignore.Default)
	a := ignore.With()
	a[0] = "changed"
	_ = append(ignore.With(), "more")
	if !slices.Equal(ignore.Default, before) {
		t.Errorf("With changed Default: %q", ignore.Default)
	}
}

// render (from the command line in load_data.csv) and idlemon (from /proc)
// decide the same for the same process, with each one's default config and
// with each one extended by the same name.
func TestRenderAndIdlemonAgree(t *testing.T) {
	idle, err := idleconfig.Parse(strings.NewReader(""), "idlemon.ini")
	if err != nil {
		t.Fatal(err)
	}
	page := render.DefaultConfig()
	idleExtra, err := idleconfig.Parse(strings.NewReader("[gpu-all]\ngpus = ALL\nignore_programs = gnome-shell\n"), "idlemon.ini")
	if err != nil {
		t.Fatal(err)
	}
	pageExtra, err := render.ParseConfig(strings.NewReader("[render]\nignore_processes = gnome-shell\n"), "config.ini")
	if err != nil {
		t.Fatal(err)
	}
	for _, lists := range []struct {
		name         string
		render, idle []string
	}{
		{"defaults", page.Ignore, idle.IgnoreFor(0)},
		{"extended", pageExtra.Ignore, idleExtra.IgnoreFor(0)},
	} {
		if !slices.Equal(lists.render, lists.idle) {
			t.Errorf("%s: render ignores %q, idlemon %q", lists.name, lists.render, lists.idle)
		}
		// comm as the kernel keeps it, the executable, the command line
		for _, p := range []ignore.Process{
			{Comm: "Xorg", Exe: "/usr/lib/xorg/Xorg", Args: "/usr/lib/xorg/Xorg vt1 -displayfd 3"},
			{Comm: "Xwayland", Exe: "/usr/bin/Xwayland", Args: "/usr/bin/Xwayland :0 -rootless"},
			{Comm: "nvidia-persiste", Exe: "/usr/bin/nvidia-persistenced", Args: "/usr/bin/nvidia-persistenced --user nvidia-persistenced"},
			{Comm: "nv-hostengine", Exe: "/usr/bin/nv-hostengine", Args: "/usr/bin/nv-hostengine -n --service-account nvidia-dcgm"},
			{Comm: "dcgm-exporter", Exe: "/usr/bin/dcgm-exporter", Args: "/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv"},
			{Comm: "nvidia-smi", Exe: "/usr/bin/nvidia-smi", Args: "nvidia-smi --query-gpu=index --format=csv"},
			{Comm: "gnome-shell", Exe: "/usr/bin/gnome-shell", Args: "/usr/bin/gnome-shell"},
			{Comm: "python3", Exe: "/usr/bin/python3.12", Args: "python3 train.py"},
			{Comm: "python", Exe: "/usr/bin/python3.12", Args: "python Xorg.py"},
			{Comm: "sh", Exe: "/usr/bin/dash", Args: "sh -c nvidia-smi"},
		} {
			r := ignore.Match(ignore.Process{Args: p.Args}, lists.render)
			i := ignore.Match(p, lists.idle)
			if r != i {
				t.Errorf("%s: %s: render ignores it: %v, idlemon: %v", lists.name, p.Args, r, i)
			}
		}
	}
}

// A name is chosen by whoever starts the process: a person's process, or
// one holding a training run's memory, is never ignored, whatever its name.
func TestIgnoredNeedsMoreThanAName(t *testing.T) {
	disguised := ignore.Process{Comm: "nvidia-persiste", Args: "nvidia-persistenced", UID: ignore.Unknown, MemMiB: ignore.Unknown}
	tests := []struct {
		name      string
		uid       int
		mem       float64
		wantIgnor bool
	}{
		{"nothing more known: the name decides", ignore.Unknown, ignore.Unknown, true},
		{"root", 0, ignore.Unknown, true},
		{"a system account", 998, ignore.Unknown, true},
		{"a person's account", 1000, ignore.Unknown, false},
		{"a little memory", ignore.Unknown, 300, true},
		{"a training run's memory", ignore.Unknown, 70000, false},
		{"exactly the limit", ignore.Unknown, ignore.MaxMemMiB, false},
		{"root with a training run's memory", 0, 70000, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := disguised
			p.UID, p.MemMiB = tt.uid, tt.mem
			if got := ignore.Ignored(p, ignore.Default); got != tt.wantIgnor {
				t.Errorf("Ignored(uid %d, %v MiB) = %v, want %v", tt.uid, tt.mem, got, tt.wantIgnor)
			}
		})
	}
}
