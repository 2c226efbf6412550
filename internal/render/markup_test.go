package render

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
)

// markupRows puts s in every string a host sends: host name and error, GPU
// name, uuid, bus id and error, user and command, a process's Slurm job,
// its name and partition, its container, the container's name and its pod
// (on a cell's detail and in the users table), root's container's name on
// a cell, on an up host with a process, a host that is down and a lost GPU;
// the health readings a host sends as text (ECC mode, clock events, the
// kernel log's state) on a degraded GPU and a failed one, a user
// whose share of a GPU is idle, and the vendor of a GPU that is not
// NVIDIA's and reports no utilization (its hover names the vendor).
func markupRows(s string) []loaddata.Row {
	ts := "2026-11-23T14:05:00Z"
	return []loaddata.Row{
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK, HostError: s,
			GPUIndex: loaddata.IntOf(0), GPUName: "n" + s, GPUUUID: s, GPUBusID: s,
			MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000), GPUUtilPct: loaddata.Num(50),
			PID: loaddata.IntOf(1), User: s, Command: s,
			SlurmJob: s, SlurmJobName: s, SlurmPartition: s, Container: s, ContainerName: s, Pod: s,
			PState: loaddata.IntOf(0), ECCMode: s, ClockEvents: "hw_slowdown " + s, RemappedRowsPending: loaddata.TriOf(true),
			ProcessSMPct: loaddata.Num(40), KernelLog: "unreadable: " + s},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(3), GPUName: "n" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			ECCMode: s, ClockEvents: s, XIDs: "79," + s,
			PID: loaddata.IntOf(5), User: s, Command: s, ProcessMemMiB: loaddata.Num(1000), ProcessSMPct: loaddata.Num(0)},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(4), GPUName: "n" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			PID: loaddata.IntOf(6), User: s, Command: s, ProcessMemMiB: loaddata.Num(1000), ProcessSMPct: loaddata.Num(0)},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(4), GPUName: "n" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			PID: loaddata.IntOf(7), User: "bob", Command: s, ProcessMemMiB: loaddata.Num(1000), ProcessSMPct: loaddata.Num(90)},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(2), GPUName: "n" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			PID: loaddata.IntOf(3), User: "root", Command: "python", ProcessMemMiB: loaddata.Num(4000),
			Container: s, ContainerName: s, Pod: s},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(2), GPUName: "n" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			PID: loaddata.IntOf(4), User: "root", Command: "python", ProcessMemMiB: loaddata.Num(100),
			Container: s, SlurmJob: "1" + s, SlurmPartition: s},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(1), GPUName: "m" + s, MemUsedMiB: loaddata.Num(5000), MemTotalMiB: loaddata.Num(8000),
			PID: loaddata.IntOf(2), User: s, Command: "/usr/bin/" + s, Preemptible: true},
		{Timestamp: ts, Host: "h" + s, HostStatus: hoststatus.OK,
			GPUIndex: loaddata.IntOf(5), GPUName: "AMD Instinct MI300X", GPUVendor: "v" + s, MemUsedMiB: loaddata.Num(20000), MemTotalMiB: loaddata.Num(196592),
			PID: loaddata.IntOf(8), User: s, Command: s, ProcessMemMiB: loaddata.Num(19800)},
		{Timestamp: ts, Host: "d" + s, HostStatus: hoststatus.Error, HostError: s},
		{Timestamp: ts, Host: "l" + s, HostStatus: hoststatus.OK, GPUBusID: s, GPUError: "e" + s},
		{Timestamp: ts, Host: "b" + s, HostStatus: hoststatus.OK, GPUBusID: "b" + s, GPUName: "x"},
	}
}

// skeleton is the page's markup with the text and attribute values left
// out: tag names and attribute names, in order.
func skeleton(t testing.TB, page string) string {
	t.Helper()
	var b strings.Builder
	tag := regexp.MustCompile(`^<(/?[a-zA-Z][a-zA-Z0-9]*)`)
	attrRe := regexp.MustCompile(`^\s+([^\s"'>/=]+)(?:=("[^"]*"|'[^']*'|[^\s"'=<>` + "`" + `]+))?`)
	for i := 0; i < len(page); {
		j := strings.IndexByte(page[i:], '<')
		if j < 0 {
			break
		}
		i += j
		m := tag.FindStringSubmatch(page[i:])
		if m == nil {
			i++ // a "<" that starts no tag is text
			continue
		}
		b.WriteString("<" + strings.ToLower(m[1]))
		i += len(m[0])
		for {
			a := attrRe.FindStringSubmatch(page[i:])
			if a == nil {
				break
			}
			b.WriteString(" " + strings.ToLower(a[1]))
			i += len(a[0])
		}
		rest := strings.TrimLeft(page[i:], " \t\n")
		rest = strings.TrimPrefix(rest, "/") // <rect ... /> in an <svg>
		if !strings.HasPrefix(rest, ">") {
			t.Fatalf("tag %s not closed where expected: %.80q", m[1], page[i:])
		}
		i = len(page) - len(rest) + 1
		b.WriteString(">\n")
		if m[1] == "style" || m[1] == "script" { // raw text up to its end tag
			k := strings.Index(page[i:], "</"+m[1])
			i += k
		}
	}
	return b.String()
}

// benign is a harmless text as long (in characters) as s, so that cutting
// long texts treats both alike.
func benign(s string) string {
	return strings.Repeat("x", utf8.RuneCountInString(s))
}

// markupSummary puts s in every string of a history: user names (in the
// plots, the idle-held table and cells), and the host, GPU id and model
// of the GPUs history keeps, on the hosts of markupRows.
func markupSummary(s string) *history.Summary {
	sum := testSummary(s)
	sum.IdleHeld = append(sum.IdleHeld, history.Spell{Host: "h" + s, GPU: "0", Users: []string{s, "alice"},
		Start: testNow.Unix() - 7200, Last: testNow.Unix(), MemMiB: 100})
	sum.Down["d"+s] = &history.HostState{DownSince: testNow.Unix() - 600, GPUs: []history.KnownGPU{{ID: s, Name: s}}}
	sum.Util[history.GPURef{Host: "h" + s, GPU: "0"}] = slices.Repeat([]float64{50}, 24)
	sum.Models30d[s] = history.Figures{GPUSeconds: 3600} // the cost line names a model without a price
	if sum.UserModels30d == nil {
		sum.UserModels30d = map[string]map[string]history.Figures{}
	}
	sum.UserModels30d[s] = map[string]history.Figures{s: {GPUSeconds: 3600}} // a team's cost, one model without a price
	return sum
}

func pageOf(t testing.TB, rows []loaddata.Row, s string) string {
	t.Helper()
	var b bytes.Buffer
	rep := testReport(t, rows, "")
	rep.History = markupSummary(s)
	rep.Config.Accounting = testAccounting(t, "[accounting]\ncurrency = EUR\nnvidia a100-sxm4-80gb = 1\n[teams]\nvision = alice, user00\n")
	if err := HTML(&b, rep); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// checkMarkup fails if the text s changes the page's markup: the same rows
// with a harmless text of the same length must give the same tags and
// attributes.
func checkMarkup(t *testing.T, s string) {
	t.Helper()
	if !utf8.ValidString(s) {
		return // the CSV reader hands out what the file holds; see FuzzMarkup
	}
	got := skeleton(t, pageOf(t, markupRows(s), s))
	want := skeleton(t, pageOf(t, markupRows(benign(s)), benign(s)))
	if got != want {
		t.Errorf("the text %q changes the markup:\n got %s\nwant %s", s, diffLine(got, want), diffLine(want, got))
	}
}

// diffLine is the first line of a that differs from b.
func diffLine(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range al {
		if i >= len(bl) || al[i] != bl[i] {
			return al[i]
		}
	}
	return "(same)"
}

var markupPayloads = []string{
	`<script>alert(1)</script>`,
	`"><img src=x onerror=alert(1)>`,
	`' onmouseover=alert(1) x='`,
	`x onmouseover=alert(1)`,
	"x`onmouseover=alert(1)",
	`a=b`,
	`</style><h1>x`,
	`</li></ul></section><section class=host>`,
	`<!--`, `-->`, `<![CDATA[`, `]]>`, `</svg><script>alert(1)</script>`, `</text></svg><img src=x onerror=alert(2)>`, `&lt;&amp;`, `&#60;script&#62;`,
	"tab\there", "new\nline", "nul\x00byte", " ", "",
	"bidi\u202eevil\u2066", "zero\u200bwidth", "a & b", `say "hi"`, "1233_[5-9%2]",
	`{{.}} ${alert(5)}`,
	`<div class=gpu-detail><table><tr><td>`,
	strings.Repeat("<b>", 200),
}

func TestMarkupDoesNotDependOnData(t *testing.T) {
	for _, p := range markupPayloads {
		checkMarkup(t, p)
	}
	// and the payloads come out as text
	page := pageOf(t, markupRows(markupPayloads[0]), markupPayloads[0])
	if strings.Contains(page, markupPayloads[0]) || !strings.Contains(page, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("the payload is not escaped as text")
	}
	// a value that needs no quotes goes without, one that does is quoted
	if !strings.Contains(page, ` data-host="h&lt;script&gt;alert(1)&lt;/script&gt;"`) {
		t.Error("data-host is not quoted and escaped")
	}
	if !strings.Contains(pageOf(t, markupRows("gpu-01.lab"), "gpu-01.lab"), ` data-host=hgpu-01.lab data-util=`) {
		t.Error("a plain data-host is quoted")
	}
}

func FuzzMarkup(f *testing.F) {
	for _, p := range markupPayloads {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkMarkup(t, s)
	})
}
