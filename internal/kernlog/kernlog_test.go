package kernlog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func ev(bus string, code int, detail string) Event {
	return Event{BusID: bus, Code: code, Detail: detail}
}

func aged(e Event, age float64) Event {
	e.Age, e.AgeKnown = age, true
	return e
}

// approx compares ages to the microsecond the stamps carry.
var approx = cmpopts.EquateApprox(0, 1e-6)

func TestRealLines(t *testing.T) {
	tests := []struct {
		file string
		want Report
	}{
		{"dmesg-vllm-5901.txt", Report{Source: SourceDmesg, Repeated: 5, Events: []Event{
			// Six lines of one XID on one GPU are one event: the newest.
			aged(ev("0000:43:00.0", 13, "Graphics Exception: ESR 0x52ff30=0x0 0x52ff34=0x20 0x52ff28=0xc81eb60 0x52ff2c=0x1174"), 93310-93297.043905),
		}}},
		{"dmesg-bumblebee-677.txt", Report{Source: SourceDmesg, Repeated: 1, Events: []Event{
			aged(ev("0000:01:00.0", 32, "Channel ID 00000000 intr 00004000"), 24130.5-24128.828608),
			aged(ev("0000:01:00.0", 31, "Ch 00000003, engmask 00000101, intr 10000000"), 24130.5-24128.834365),
		}}},
		{"dmesg-bumblebee-608.txt", Report{Source: SourceDmesg, Events: []Event{
			aged(ev("0000:08:00.0", 44, "Ch 00000000, engmask 00000101, intr 10000000"), 120-94.573839),
			aged(ev("0000:08:00.0", 31, "Ch 00000001, engmask 00000101, intr 10000000"), 120-94.627944),
		}}},
		{"dmesg-ubuntuforums-2012.txt", Report{Source: SourceDmesg, Events: []Event{
			aged(ev("0000:03:00.0", 13, "0003 00000000 00008297 00001098 00000000 00000044"), 176840-176830.774761),
		}}},
		{"dmesg-gpud-46.txt", Report{Source: SourceDmesg, Repeated: 2, Events: []Event{
			aged(ev("0000:cb:00.0", 13, "Graphics Exception: ESR 0x57c730=0xc04000b 0x57c734=0x24 0x57c728=0x1f81fb60 0x57c72c=0x1174"), 3000-2950.100002),
			aged(ev("0000:cb:00.0", 109, "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"), 3000-2955.2),
		}}},
		{"journal-open-gpu-kernel-modules-1150.txt", Report{Source: SourceJournal, Repeated: 3, Events: []Event{
			ev("0000:dc:00.0", 45, "Ch 00000002 caused by previous Xid 149"),
			ev("0000:ed:00.0", 45, "Ch 00000001 caused by previous Xid 145"),
			ev("0000:ba:00.0", 45, "Ch 00000003 caused by previous Xid 145"),
			ev("0000:97:00.0", 45, "Ch 00000003 caused by previous Xid 145"),
		}}},
		{"journal-nvsentinel-gpud.txt", Report{Source: SourceJournal, Repeated: 1, Events: []Event{
			ev("0000:44:00.0", 79, "GPU has fallen off the bus"),
			ev("0019:01:00.0", 149, "NETIR Fatal XC0 i0 Link -1 (0x000fe406 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"),
			ev("0018:01:00.0", 145, "RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"),
			ev("0000:01:00.0", 13, "Graphics Exception: ESR 0x504224=0x80000041 0x504228=0x200800c0 0x50422c=0x221 0x504234=0x0"),
		}}},
	}
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) != len(tests) {
		t.Errorf("%d files in testdata, %d tested: test each", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			got, err := Parse(readTestdata(t, tt.file))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, approx, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func journal(lines ...string) []byte {
	return []byte("source journal\n" + strings.Join(lines, "\n") + "\n")
}

func dmesg(uptime string, lines ...string) []byte {
	return []byte("source dmesg\nuptime " + uptime + "\n" + strings.Join(lines, "\n") + "\n")
}

func TestParse(t *testing.T) {
	const xid79 = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."
	fallen := ev("0000:3b:00.0", 79, "GPU has fallen off the bus")
	tests := []struct {
		name string
		in   []byte
		want Report
	}{
		{
			name: "journal: one XID",
			in:   journal("1732600000.123456 gpu01 kernel: " + xid79),
			want: Report{Source: SourceJournal, Events: []Event{fallen}},
		},
		{
			name: "no XID since the last poll",
			in:   []byte("source journal\n"),
			want: Report{Source: SourceJournal},
		},
		{
			name: "dmesg: the age comes from the uptime line",
			in:   dmesg("500.25", "[  400.250000] "+xid79),
			want: Report{Source: SourceDmesg, Events: []Event{aged(fallen, 100)}},
		},
		{
			name: "dmesg with the caller id of CONFIG_PRINTK_CALLER",
			in:   dmesg("500", "[  400.000000][ T1234] "+xid79, "[  401.000000][    C3] NVRM: Xid (PCI:0000:3c:00): 48, DBE"),
			want: Report{Source: SourceDmesg, Events: []Event{aged(fallen, 100), aged(ev("0000:3c:00.0", 48, "DBE"), 99)}},
		},
		{
			name: "a stamp later than the uptime is age 0, not negative",
			in:   dmesg("10", "[   11.000000] "+xid79),
			want: Report{Source: SourceDmesg, Events: []Event{aged(fallen, 0)}},
		},
		{
			// logger and systemd-cat never reach journalctl -k; were such a
			// line there, its identifier is not plain "kernel:".
			name: "a user's message quoting an XID does not count",
			in: journal(
				"1732600000.1 gpu01 kernel: audit: user said NVRM: Xid (PCI:0000:3b:00): 79, x",
				"1732600000.2 gpu01 alice[4242]: NVRM: Xid (PCI:0000:3b:00): 79, forged",
				"1732600000.3 gpu01 kernel[4242]: NVRM: Xid (PCI:0000:3b:00): 79, forged",
				"1732600000.4 gpu01 kernel:  NVRM: Xid (PCI:0000:3b:00): 79, forged",
				"1732600000.5 gpu01 kernel: x NVRM: Xid (PCI:0000:3b:00): 79, forged"),
			want: Report{Source: SourceJournal, Skipped: 5},
		},
		{
			name: "dmesg: only a message that starts with the XID counts",
			in:   dmesg("100", "[   50.000000] usb 1-1: NVRM: Xid (PCI:0000:3b:00): 79, forged", "[   50.000000]NVRM: Xid (PCI:0000:3b:00): 79, x"),
			want: Report{Source: SourceDmesg, Skipped: 2},
		},
		{
			name: "a journal line in a dmesg section and the reverse are skipped",
			in:   dmesg("100", "1732600000.1 gpu01 kernel: "+xid79),
			want: Report{Source: SourceDmesg, Skipped: 1},
		},
		{
			name: "unreadable addresses and codes are skipped",
			in: journal(
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b): 79, no device",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:20): 79, device 0x20 past 0x1f",
				"1.0 h kernel: NVRM: Xid (PCI:0000:zz:00): 79, hex garbage",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00): -79, negative",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 0, zero",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 18446744073709551616, 2^64",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 0x4f, hex",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00):  79, two spaces",
				"1.0 h kernel: NVRM: Xid (PCI:0000:3b:00)",
				"1.0 h kernel: NVRM: Xid",
				"x.0 h kernel: "+xid79,
				"-1 h kernel: "+xid79,
				"1.0 kernel: "+xid79),
			want: Report{Source: SourceJournal, Skipped: 13},
		},
		{
			name: "an old line that ends after the code's comma",
			in:   journal("1.0 h kernel: NVRM: Xid (0000:01:00): 16, "),
			want: Report{Source: SourceJournal, Events: []Event{ev("0000:01:00.0", 16, "")}},
		},
		{
			name: "a code with no detail at all",
			in:   journal("1.0 h kernel: NVRM: Xid (PCI:0000:01:00): 79"),
			want: Report{Source: SourceJournal, Events: []Event{ev("0000:01:00.0", 79, "")}},
		},
		{
			name: "control characters and a process name with a comma stay text",
			in:   journal("1.0 h kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=7, name=a, b\x1b[31m, Graphics \x07Exception"),
			want: Report{Source: SourceJournal, Events: []Event{ev("0000:01:00.0", 13, "b?[31m, Graphics ?Exception")}},
		},
		{
			name: "CRLF line ends",
			in:   []byte("source dmesg\r\nuptime 20\r\n[   10.000000] " + xid79 + "\r\n"),
			want: Report{Source: SourceDmesg, Events: []Event{aged(fallen, 10)}},
		},
		{
			name: "a line past maxLine is read to maxLine",
			in:   journal("1.0 h kernel: NVRM: Xid (PCI:0000:01:00): 13, " + strings.Repeat("x", 3*maxLine)),
			want: Report{Source: SourceJournal, Events: []Event{ev("0000:01:00.0", 13, strings.Repeat("x", maxDetail-3)+"…")}},
		},
		{
			name: "an address cut off by maxLine is skipped",
			in:   journal("1.0 " + strings.Repeat("h", maxLine) + " kernel: " + xid79),
			want: Report{Source: SourceJournal, Skipped: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, got, approx, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

// A flood of one XID cannot hide another: repeats are one event, and the
// cap counts distinct (GPU, XID) pairs.
func TestFlood(t *testing.T) {
	var lines []string
	for i := range 100000 {
		lines = append(lines, fmt.Sprintf("%d.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 13, flood %d", i, i))
	}
	lines = append(lines, "200000.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.")
	got, err := Parse(journal(lines...))
	if err != nil {
		t.Fatal(err)
	}
	want := Report{Source: SourceJournal, Repeated: 99999, Events: []Event{
		ev("0000:3b:00.0", 13, "flood 99999"),
		ev("0000:3b:00.0", 79, "GPU has fallen off the bus"),
	}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}

	// Distinct pairs past maxEvents are counted, not kept.
	lines = nil
	for i := range maxEvents + 10 {
		lines = append(lines, fmt.Sprintf("1.0 h kernel: NVRM: Xid (PCI:0000:%02x:00): %d, x", i%256, 1+i/256))
	}
	got, err = Parse(journal(lines...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Events) != maxEvents || got.Skipped != 10 {
		t.Errorf("%d events, %d skipped; want %d and 10", len(got.Events), got.Skipped, maxEvents)
	}
}

func TestParseFails(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", `kernel_log section: "" names no source (journal or dmesg)`},
		{"unknown source", "source syslog\n", `kernel_log section: "source syslog" names no source (journal or dmesg)`},
		{"an XID line first", "1.0 h kernel: NVRM: Xid (PCI:0000:01:00): 79\n", `kernel_log section: "1.0 h kernel: NVRM: Xid (PCI:0000:01:00): 79" names no source (journal or dmesg)`},
		{"dmesg without uptime", "source dmesg\n", `kernel_log section: "source dmesg" without its "uptime" line`},
		{"dmesg with a bad uptime", "source dmesg\nuptime -5\n", `kernel_log section: "uptime -5" is not an uptime line`},
		{"dmesg with an XID where the uptime goes", "source dmesg\n[1.0] NVRM: Xid (PCI:0000:01:00): 79\n", `kernel_log section: "[1.0] NVRM: Xid (PCI:0000:01:00): 79" is not an uptime line`},
		{"control characters in the first line", "source \x1b[2J\n", `kernel_log section: "source ?[2J" names no source (journal or dmesg)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			if err == nil || err.Error() != tt.want {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCanonicalBusID(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"00000000:3B:00.0", "0000:3b:00.0", true}, // nvidia-smi
		{"0000:3b:00.0", "0000:3b:00.0", true},     // /proc/driver/nvidia/gpus
		{"0000:3b:00", "0000:3b:00.0", true},       // an XID line
		{"0000:3B:1F.7", "0000:3b:1f.7", true},
		{"00000019:01:00.0", "0019:01:00.0", true},
		{"10000:e0:00.0", "10000:e0:00.0", true}, // Intel VMD domains pass 0xffff
		// no driver prints a domain of fewer than 4 digits; accepting one let
		// a netfilter log prefix ("NVRM: Xid (0:18:00): 79,") pass for an XID
		{"0:3b:00", "", false},
		{"", "", false},
		{"3b:00.0", "", false},
		{"PCI:0000:3b:00", "", false},
		{"0000:3b:00.8", "", false},
		{"0000:3b:20.0", "", false},
		{"0000:3b:0.0", "", false},
		{"0000:3bb:00.0", "", false},
		{"000000000:3b:00.0", "", false},
		{"0000:3b:00.0.0", "", false},
		{"0000:+3:00.0", "", false},
		{"0000:3b:00.", "", false},
		{"0000:3b:00:0", "", false},
		{"0000:3b:00.0 ", "", false},
		{"0x00:3b:00.0", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := CanonicalBusID(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("CanonicalBusID(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.txt")
	for _, file := range files {
		f.Add(readTestdata(f, filepath.Base(file)), "1.0 h kernel: NVRM: Xid (PCI:0000:3b:00): 79, x")
	}
	f.Add([]byte("source dmesg\r\nuptime 20\r\n[   10.000000][ T1] NVRM: Xid (0000:01:00): 16, \r\n"), "[1.0] NVRM: Xid (PCI:0000:3b:00): 79, x")
	f.Add([]byte("source journal\n"), "")
	f.Fuzz(func(t *testing.T, body []byte, forged string) {
		rep, err := Parse(body)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if rep.Source != SourceJournal && rep.Source != SourceDmesg {
			t.Fatalf("source %q", rep.Source)
		}
		if len(rep.Events) > maxEvents || rep.Skipped < 0 || rep.Repeated < 0 {
			t.Fatalf("%d events, %d skipped, %d repeated", len(rep.Events), rep.Skipped, rep.Repeated)
		}
		nonBlank := 0
		for _, l := range strings.Split(string(body), "\n") {
			if strings.TrimSpace(l) != "" {
				nonBlank++
			}
		}
		if len(rep.Events)+rep.Skipped+rep.Repeated > nonBlank {
			t.Fatalf("%d events, %d skipped, %d repeated from %d lines", len(rep.Events), rep.Skipped, rep.Repeated, nonBlank)
		}
		seen := map[eventKey]bool{}
		for _, e := range rep.Events {
			if canon, ok := CanonicalBusID(e.BusID); !ok || canon != e.BusID {
				t.Fatalf("bus id %q is not canonical", e.BusID)
			}
			if e.Code < 1 || e.Code > maxCode || seen[eventKey{e.BusID, e.Code}] {
				t.Fatalf("event %+v: bad code or listed twice", e)
			}
			seen[eventKey{e.BusID, e.Code}] = true
			if len(e.Detail) > maxDetail || strings.ContainsAny(e.Detail, "\n\r\x1b\x00") {
				t.Fatalf("detail %q", e.Detail)
			}
			if e.AgeKnown != (rep.Source == SourceDmesg) || e.Age < 0 {
				t.Fatalf("event %+v from %s", e, rep.Source)
			}
		}

		// A line that does not start as the kernel's own (a stamp, then
		// "kernel: " in the journal) never changes the report, whatever it
		// holds after that.
		line := "user " + strings.ReplaceAll(forged, "\n", " ")
		again, err := Parse(append(append([]byte{}, body...), "\n"+line+"\n"...))
		if err != nil {
			t.Fatalf("a line more made Parse fail: %v", err)
		}
		if diff := cmp.Diff(rep.Events, again.Events); diff != "" {
			t.Fatalf("line %q changed the events:\n%s", line, diff)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	var lines []string
	for i := range 256 {
		lines = append(lines, fmt.Sprintf("[%6d.000000] NVRM: Xid (PCI:0000:%02x:00): %d, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x52e7b0=0x101000e", 1000+i, 0x18+i%8, 13+i%3))
	}
	body := dmesg("5000", lines...)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := Parse(body)
		if err != nil || len(rep.Events) != 24 {
			b.Fatalf("err %v, %d events", err, len(rep.Events))
		}
	}
}
