package publish

import (
	"context"
	"io"
	"mime/quotedprintable"
	"net/mail"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/gpumon/gpumon/internal/cluster"
	"github.com/gpumon/gpumon/internal/history"
	"github.com/gpumon/gpumon/internal/hoststatus"
	"github.com/gpumon/gpumon/internal/loaddata"
	"github.com/gpumon/gpumon/internal/notify"
	"github.com/gpumon/gpumon/internal/reservations"
)

var resvNow = time.Date(2026, 11, 25, 14, 0, 0, 0, time.UTC)

// resvRow is a row of GPU idx of host, with a process of user holding
// mem MiB ("" for none).
func resvRow(host string, idx int64, user string, mem float64) loaddata.Row {
	r := loaddata.Row{Timestamp: "2026-11-25T14:00:00Z", Host: host, HostStatus: hoststatus.OK,
		GPUIndex: loaddata.IntOf(idx), GPUName: "NVIDIA H100 80GB HBM3",
		MemUsedMiB: loaddata.Num(mem), MemTotalMiB: loaddata.Num(81559), GPUUtilPct: loaddata.Num(50)}
	if user != "" {
		r.PID, r.User, r.Command, r.ProcessMemMiB = loaddata.IntOf(4242), user, "python train.py", loaddata.Num(mem)
	}
	return r
}

func preemptible(r loaddata.Row) loaddata.Row { r.Preemptible = true; return r }

// resvCluster is the cluster of rows with the reservations, as render
// builds it: cluster.Builder gives each GPU its current reservation.
func resvCluster(rows []loaddata.Row, resv ...reservations.Reservation) *cluster.Cluster {
	b := cluster.NewBuilder(cluster.Options{FreeMemMiB: 500, Reservations: resv, Now: resvNow})
	for i := range rows {
		b.Add(&rows[i])
	}
	return b.Cluster()
}

// Each holder of a GPU whose current reservation is someone else's is
// one observation, with their memory and the reservation: the owner's own
// processes, idlemon's idle-time job and a reservation that names nobody
// are not; a whole-host reservation counts for each GPU; names compare
// exactly.
func TestUnreservedObservations(t *testing.T) {
	until := resvNow.Add(4 * time.Hour)
	forAlice := func(gpus ...int) reservations.Reservation {
		return reservations.Reservation{Host: "gpu01", GPUs: gpus, Name: "alice", Comment: "ICML <script>", Until: until}
	}
	used := func(gpu, user string, mem float64) notify.UnreservedGPU {
		return notify.UnreservedGPU{Host: "gpu01", GPU: gpu, Model: "NVIDIA H100 80GB HBM3", User: user, MemMiB: mem,
			Commands: []string{"python train.py"}, Reservation: notify.Reserved{Owner: "alice", Until: until, Comment: "ICML <script>"}}
	}
	twice := func(g notify.UnreservedGPU) notify.UnreservedGPU {
		g.Commands = append(g.Commands, g.Commands...)
		return g
	}
	tests := []struct {
		name string
		rows []loaddata.Row
		resv []reservations.Reservation
		want []notify.UnreservedGPU
	}{
		{"another holder", []loaddata.Row{resvRow("gpu01", 0, "bob", 12000)},
			[]reservations.Reservation{forAlice(0)}, []notify.UnreservedGPU{used("0", "bob", 12000)}},
		{"the holder is the owner", []loaddata.Row{resvRow("gpu01", 0, "alice", 12000)},
			[]reservations.Reservation{forAlice(0)}, nil},
		{"names compare exactly", []loaddata.Row{resvRow("gpu01", 0, "Alice", 12000)},
			[]reservations.Reservation{forAlice(0)}, []notify.UnreservedGPU{used("0", "Alice", 12000)}},
		{"two holders, one twice", []loaddata.Row{resvRow("gpu01", 0, "bob", 1000), resvRow("gpu01", 0, "alice", 3000),
			resvRow("gpu01", 0, "carol", 2000), resvRow("gpu01", 0, "bob", 500)},
			[]reservations.Reservation{forAlice(0)},
			[]notify.UnreservedGPU{twice(used("0", "bob", 1500)), used("0", "carol", 2000)}},
		{"a whole-host reservation counts for every GPU", []loaddata.Row{resvRow("gpu01", 0, "bob", 1000),
			resvRow("gpu01", 1, "", 0), resvRow("gpu01", 2, "carol", 2000)},
			[]reservations.Reservation{forAlice()},
			[]notify.UnreservedGPU{used("0", "bob", 1000), used("2", "carol", 2000)}},
		{"another GPU's reservation", []loaddata.Row{resvRow("gpu01", 0, "bob", 1000)},
			[]reservations.Reservation{forAlice(1)}, nil},
		{"an ended reservation", []loaddata.Row{resvRow("gpu01", 0, "bob", 1000)},
			[]reservations.Reservation{{Host: "gpu01", GPUs: []int{0}, Name: "alice", Until: resvNow.Add(-time.Minute)}}, nil},
		{"the idle-time job holds nothing", []loaddata.Row{preemptible(resvRow("gpu01", 0, "idlejob", 1000))},
			[]reservations.Reservation{forAlice(0)}, nil},
		{"a reservation that names nobody", []loaddata.Row{resvRow("gpu01", 0, "bob", 1000)},
			[]reservations.Reservation{{Host: "gpu01", GPUs: []int{0}, Comment: "maintenance"}}, nil},
		{"a host that does not answer", []loaddata.Row{{Timestamp: "2026-11-25T14:00:00Z", Host: "gpu01", HostStatus: hoststatus.Unreachable}},
			[]reservations.Reservation{forAlice()}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := unreservedNow(resvCluster(tt.rows, tt.resv...))
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unreserved (-want +got):\n%s", diff)
			}
		})
	}
}

// Runs every 5 minutes with mail delivered by exim: a GPU held during
// someone else's reservation is told to the reservation's owner and to the
// holder (mail_users), and to the admins; its end to the owner and the
// admins, once.
func TestUnreservedMailed(t *testing.T) {
	adminMail := mailSubjects(t, "urvadmin")
	ownerMail := mailSubjects(t, "urvowner")
	holderMail := mailSubjects(t, "urvholder")
	cfg := Config{
		History: history.Config{DB: filepath.Join(t.TempDir(), "history.db"), Params: history.DefaultParams, KeepDays: 14},
		Notify: notify.Config{Targets: notify.Targets{MailTo: []string{"urvadmin@localhost"}, UserDomain: "localhost"},
			Params: notify.Params{HostDownAfter: 15 * time.Minute, RemindAfter: 24 * time.Hour}, Sendmail: []string{"/usr/sbin/sendmail", "-t", "-i", "-odi"}},
	}
	start := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	resv := reservations.Reservation{Host: "gpu01", GPUs: []int{0}, Name: "urvowner", Comment: "ICML <b>", Until: start.Add(2 * time.Hour)}
	for m := 0; m <= 40; m += 5 {
		at := start.Add(time.Duration(m) * time.Minute)
		holder := "urvholder"
		if m >= 30 {
			holder = "" // gone
		}
		row := resvRow("gpu01", 0, holder, 30000)
		row.Timestamp, row.GPUUtilPct = at.Format(time.RFC3339), loaddata.Num(95)
		b := cluster.NewBuilder(cluster.Options{FreeMemMiB: 500, Reservations: []reservations.Reservation{resv}, Now: at})
		b.Add(&row)
		var log strings.Builder
		err := Publish(context.Background(), cfg, Run{Cluster: b.Cluster(), Now: at.Add(20 * time.Second), Loc: time.UTC,
			Log: &log, Prog: "render", Files: func(History) []File { return nil }})
		if err != nil {
			t.Fatalf("minute %d: %v\n%s", m, err, log.String())
		}
	}
	fired := "[gpumon] GPU 0 on gpu01, reserved for urvowner, used by urvholder"
	over := "[gpumon] resolved: GPU 0 on gpu01 no longer used by urvholder in urvowner's reservation"
	for _, tt := range []struct {
		who  string
		read func() ([]string, []*mail.Message)
		want []string
	}{
		{"the admins", adminMail, []string{fired, over}},
		{"the owner", ownerMail, []string{"[gpumon] urvholder uses GPU 0 on gpu01, reserved for you",
			"[gpumon] urvholder no longer uses GPU 0 on gpu01, reserved for you"}},
		{"the holder", holderMail, []string{"[gpumon] GPU 0 on gpu01, which you use, is reserved for urvowner"}},
	} {
		got, msgs := tt.read()
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("%s's mailbox (-want +got):\n%s", tt.who, diff)
		}
		if len(msgs) > 0 {
			body, _ := io.ReadAll(quotedprintable.NewReader(msgs[0].Body))
			want := "GPU 0 on gpu01 (NVIDIA H100 80GB HBM3) is reserved for urvowner until " +
				start.Add(2*time.Hour).Format("2006-01-02 15:04 MST") + " (ICML <b>), and urvholder uses it (29.3 GiB in use"
			if !strings.Contains(string(body), want) {
				t.Errorf("%s's first mail lacks %q:\n%s", tt.who, want, body)
			}
		}
	}
}
