package render

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpumon/gpumon/internal/loaddata"
)

// unreservedRows are gpu01 with GPU 0 held by alice and by user, and GPU
// 1 by carol; resvFile reserves the whole host for carol with comment.
func unreservedRows(user string) []loaddata.Row {
	rows := leanRows()
	other := rows[0]
	other.PID, other.User, other.ProcessMemMiB = loaddata.IntOf(4102), user, loaddata.Num(1000)
	mine := rows[1]
	mine.PID, mine.User, mine.Command, mine.ProcessMemMiB, mine.MemUsedMiB = loaddata.IntOf(4103), "carol", "python eval.py", loaddata.Num(2000), loaddata.Num(2000)
	return []loaddata.Row{rows[0], other, mine}
}

func resvFile(t testing.TB, comment string) string {
	t.Helper()
	js, err := json.Marshal(map[string]any{"gpu01": []any{map[string]any{"name": "carol", "date": "2026-11-30 18:00", "comment": comment}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "reservations.json")
	if err := os.WriteFile(path, js, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Beside a reservation, the page, -text and status.json say who uses the
// GPU that is not its owner; what hosts and the reservations file say is
// text, never markup.
func TestUnreservedShown(t *testing.T) {
	const hostile = `<script>alert(1)</script>`
	rep := testReport(t, unreservedRows(hostile), resvFile(t, "ICML "+hostile))
	var page bytes.Buffer
	if err := HTML(&page, rep); err != nil {
		t.Fatal(err)
	}
	escaped := `&lt;script&gt;alert(1)&lt;/script&gt;`
	for _, want := range []string{
		`<p class=n>reserved by carol until 2026-11-30 18:00 UTC: ICML ` + escaped + ` · used by alice, ` + escaped + `</p>`,
		`<span class=tag>reserved: carol</span>`,
		`<p class=n>reserved by carol until 2026-11-30 18:00 UTC: ICML ` + escaped + `</p>`, // GPU 1: carol's own
	} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(page.String(), "<span class=tag>reserved: carol</span>"); n != 1 {
		t.Errorf("%d cells tagged reserved: carol, want GPU 0's alone", n)
	}
	if strings.Contains(page.String(), "<script>alert") {
		t.Error("a holder's name or a comment is markup on the page")
	}

	var text bytes.Buffer
	if err := writeText(&text, rep, false); err != nil {
		t.Fatal(err)
	}
	if want := "reserved by carol until 2026-11-30 18:00: ICML " + hostile + " · used by alice, " + hostile; !strings.Contains(text.String(), want) {
		t.Errorf("-text lacks %q:\n%s", want, text.String())
	}

	var st struct {
		Hosts []struct {
			GPUs []struct {
				UnreservedUsers []string `json:"unreserved_users"`
			} `json:"gpus"`
		} `json:"hosts"`
	}
	var js bytes.Buffer
	if err := writeJSON(&js, rep); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for _, g := range st.Hosts[0].GPUs {
		got = append(got, g.UnreservedUsers)
	}
	if diff := cmp.Diff([][]string{{"alice", hostile}, nil}, got); diff != "" {
		t.Errorf("status.json's unreserved_users (-want +got):\n%s", diff)
	}
}

// status.json's unreserved_users are written byte for byte as
// encoding/json writes them, whatever a host calls its users.
func TestUnreservedStatusAsEncodingJSON(t *testing.T) {
	for _, user := range []string{"bob", "", `<"&'>`, "\x00\x1b[31m", "\xff\xfe", "\u2028\u2029", `\"}]},{`} {
		rep := testReport(t, unreservedRows(user), resvFile(t, user))
		var got, want bytes.Buffer
		if err := writeJSON(&got, rep); err != nil {
			t.Fatal(err)
		}
		if err := json.NewEncoder(&want).Encode(statusOf(rep)); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("streamed status.json differs for %q:\n%s", user, cmp.Diff(want.String(), got.String()))
		}
		if !strings.Contains(got.String(), `"unreserved_users":["alice",`) {
			t.Errorf("no unreserved_users for %q:\n%s", user, got.String())
		}
	}
}
